//! Soft tokens in a forward: rows that take the place of placeholder ids' embeddings (an image's
//! or a recording's soft tokens from its tower), as transformers' `Gemma4Model.forward` merges
//! them. The rows are used as they come (no `√H` embedding scale); the per-layer embeddings look
//! up the pad id at their positions while their context part reads the merged rows; and on a
//! model with `use_bidirectional_attention: "vision"` each picture's span is a block whose rows
//! see each other both ways on sliding layers (a recording's stays causal).

use std::borrow::Cow;
use std::ops::Range;

use super::Gemma;
use super::config::{AttnKind, ImageBlocks};
use crate::error::{Error, Result};

/// Rows a forward takes in place of the embeddings of some of its ids.
#[derive(Debug, Clone, Copy)]
pub struct Soft<'a> {
    /// Offset of the first replaced id in the forward's ids.
    pub at: usize,
    /// `n × H` values, the tower's projected output.
    pub rows: &'a [f32],
    /// Rows that stay causal whatever the model does with pictures (a recording's).
    pub causal: bool,
}

/// What a forward with soft tokens needs besides its ids: the ids the per-layer embeddings look
/// up, and the bidirectional blocks in absolute positions.
pub(crate) struct Merge<'a> {
    pub soft: &'a [Soft<'a>],
    /// The forward's ids, borrowed when no soft token replaces any.
    pub ple_ids: Cow<'a, [u32]>,
    pub blocks: Vec<Range<usize>>,
}

impl Soft<'_> {
    /// Rows replaced.
    pub fn len(&self, hidden: usize) -> usize {
        self.rows.len() / hidden.max(1)
    }
}

impl Gemma {
    /// Checks `soft` against a forward of `ids` at `pos` and resolves what it changes.
    pub(crate) fn merge<'a>(
        &self,
        ids: &'a [u32],
        soft: &'a [Soft<'a>],
        pos: usize,
    ) -> Result<Merge<'a>> {
        let h = self.config.hidden_size;
        let mut ple_ids = Cow::Borrowed(ids);
        let mut blocks = Vec::new();
        let mut end = 0;
        for s in soft {
            let n = s.len(h);
            if s.rows.is_empty() || s.rows.len() % h != 0 {
                return Err(Error::Invalid(format!(
                    "soft tokens of {} values are not rows of {h}",
                    s.rows.len()
                )));
            }
            if s.at < end || s.at + n > ids.len() {
                return Err(Error::Invalid(format!(
                    "soft tokens at {}..{} overlap or leave the forward's {} ids",
                    s.at,
                    s.at + n,
                    ids.len()
                )));
            }
            end = s.at + n;
            ple_ids.to_mut()[s.at..end].fill(self.config.pad_token_id);
            if self.config.image_blocks != ImageBlocks::Causal && !s.causal {
                blocks.push(pos + s.at..pos + end);
            }
        }
        Ok(Merge {
            soft,
            ple_ids,
            blocks,
        })
    }
}

/// The key positions a query at `p` sees on a layer of `kind`: causal (within `window` on sliding
/// layers), widened to the image block `p` lies in as `rule` says.
pub(crate) fn visible(
    rule: ImageBlocks,
    blocks: &[Range<usize>],
    kind: AttnKind,
    window: usize,
    p: usize,
) -> Range<usize> {
    let sliding = kind == AttnKind::Sliding;
    let start = if sliding {
        (p + 1).saturating_sub(window)
    } else {
        0
    };
    let block = blocks.iter().find(|b| b.contains(&p));
    match (rule, block) {
        (ImageBlocks::Sliding, Some(b)) if sliding => start..b.end,
        (ImageBlocks::Every, Some(b)) => start.min(b.start)..b.end,
        _ => start..p + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_in_an_image_sees_it_as_transformers_masks_it() {
        use AttnKind::{Full, Sliding};
        use ImageBlocks::{Causal, Every, Sliding as OnSliding};
        let blocks = vec![3..17, 20..22];
        // Text, and every image of a causal model: causal, within the window when sliding.
        for rule in [Causal, OnSliding, Every] {
            assert_eq!(visible(rule, &blocks, Sliding, 4, 2), 0..3);
            assert_eq!(visible(rule, &blocks, Full, 4, 18), 0..19);
        }
        assert_eq!(visible(Causal, &blocks, Sliding, 4, 10), 7..11);
        // 26B/31B: to the image's end on sliding layers, still within the window behind.
        assert_eq!(visible(OnSliding, &blocks, Sliding, 4, 10), 7..17);
        assert_eq!(visible(OnSliding, &blocks, Full, 4, 10), 0..11);
        // 12B: the whole image on every layer, the window notwithstanding.
        assert_eq!(visible(Every, &blocks, Sliding, 4, 10), 3..17);
        assert_eq!(visible(Every, &blocks, Full, 4, 10), 0..17);
    }
}
