//! Pictures sent with a message: each file read within limits, cut into the patches of the
//! model's vision tower at its token budget and encoded ([`encode`]); each `<|image|>` the chat
//! template wrote for one expanded into begin-image, the picture's run of placeholders and
//! end-image ([`expand`]), as transformers' processor expands it; and a conversation's images
//! carried along when its ids move ([`carry`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gemma_media::{Picture, picture::MAX_FILE};
use gemma_model::error::{Error, Result};
use gemma_model::vision::config::VisionSpec;
use gemma_model::vision::{PatchInput, VisionTower};

use super::images::{Image, ImageKey, image_key};

/// One picture, encoded.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// Its file, for messages.
    pub path: PathBuf,
    /// Its identity.
    pub key: ImageKey,
    /// Its soft tokens, `tokens × text hidden`.
    pub rows: Arc<Vec<f32>>,
    /// Soft tokens.
    pub tokens: usize,
    /// The budget it was encoded at.
    pub budget: usize,
    /// The file's bytes, for the engine's copy.
    pub bytes: Arc<Vec<u8>>,
}

/// Reads, cuts and encodes the picture at `path` with `tower` at `budget` soft tokens at most.
pub fn encode(tower: &VisionTower, path: &Path, budget: usize) -> Result<Encoded> {
    if !gemma_media::BUDGETS.contains(&budget) {
        return Err(Error::Invalid(format!(
            "{budget} image tokens is not a budget Gemma 4 takes: use 70, 140, 280, 560 or 1120"
        )));
    }
    let name = path.display().to_string();
    let bytes = gemma_files::read_limited(path, MAX_FILE)
        .map_err(|e| Error::Invalid(format!("cannot read the picture {name}: {e}")))?;
    encode_bytes(tower, bytes, &name, budget).map(|e| Encoded {
        path: path.to_path_buf(),
        ..e
    })
}

/// [`encode`] of a picture's `bytes`; `name` names it in errors.
pub fn encode_bytes(
    tower: &VisionTower,
    bytes: Vec<u8>,
    name: &str,
    budget: usize,
) -> Result<Encoded> {
    let picture = Picture::decode(&bytes, name).map_err(|e| Error::Invalid(e.to_string()))?;
    let spec = tower.spec();
    let patches = gemma_media::patches_of(&picture.rgb, budget, spec.input_side() as u32)
        .map_err(|e| Error::Invalid(format!("{name}: {e}")))?;
    let rows = tower.encode(PatchInput {
        values: &patches.values,
        positions: &patches.positions,
    })?;
    Ok(Encoded {
        path: PathBuf::from(name),
        key: image_key(&bytes, budget),
        tokens: rows.len() / spec.text_hidden.max(1),
        rows: Arc::new(rows),
        budget,
        bytes: Arc::new(bytes),
    })
}

/// `ids` with each image placeholder from `from` on (the new turn, where the template wrote
/// one per picture) replaced, in order, by begin-image, `encoded`'s placeholders and end-image;
/// and where each picture now lies. Refused when the placeholders and the pictures differ in
/// number (the text itself held `<|image|>`).
pub fn expand(
    ids: &[u32],
    from: usize,
    spec: &VisionSpec,
    encoded: &[Encoded],
) -> Result<(Vec<u32>, Vec<Image>)> {
    let image = spec.image_token_id;
    let marker = |i: usize| i >= from && ids[i] == image;
    let found = (from..ids.len()).filter(|&i| marker(i)).count();
    if found != encoded.len() {
        return Err(Error::Invalid(format!(
            "the message holds {found} image marker(s) for {} picture(s): remove `<|image|>` \
             from its text",
            encoded.len()
        )));
    }
    let mut out =
        Vec::with_capacity(ids.len() + encoded.iter().map(|e| e.tokens + 2).sum::<usize>());
    let mut placed = Vec::with_capacity(encoded.len());
    let mut next = encoded.iter();
    for (i, &id) in ids.iter().enumerate() {
        if !marker(i) {
            out.push(id);
            continue;
        }
        let e = next.next().expect("counted above");
        out.push(spec.boi_token_id);
        placed.push(Image {
            at: out.len(),
            rows: e.rows.clone(),
            key: e.key,
            budget: e.budget,
        });
        out.extend(std::iter::repeat_n(image, e.tokens));
        out.push(spec.eoi_token_id);
    }
    Ok((out, placed))
}

/// The images of a conversation whose ids were `old` and are now `new`, the part after BOS and
/// the header (`old_base`, `new_base` ids in) kept where it is the same: an image survives when
/// its run, with the ids around it, is found unchanged at its new place.
pub fn carry(
    images: &[Image],
    hidden: usize,
    (old, old_base): (&[u32], usize),
    (new, new_base): (&[u32], usize),
) -> Vec<Image> {
    images
        .iter()
        .filter_map(|i| {
            let span = i.span(hidden);
            let at = (span.start + new_base).checked_sub(old_base)?;
            let moved = at..at + span.len();
            let around = |r: &std::ops::Range<usize>, ids: &[u32]| {
                ids.get(r.start.checked_sub(1)?..r.end + 1)
                    .map(<[u32]>::to_vec)
            };
            let same = around(&span, old).is_some() && around(&span, old) == around(&moved, new);
            same.then(|| Image { at, ..i.clone() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemma_model::vision::config::{TowerSpec, UnifiedSpec};

    fn spec() -> VisionSpec {
        VisionSpec {
            tower: TowerSpec::Unified(UnifiedSpec {
                width: 2,
                positions: 4,
            }),
            patch: 16,
            pool: 3,
            eps: 1e-6,
            text_hidden: 1,
            image_token_id: 9,
            boi_token_id: 8,
            eoi_token_id: 7,
        }
    }

    fn picture(n: usize, key: u8) -> Encoded {
        Encoded {
            path: PathBuf::from("p.png"),
            key: [key; 32],
            rows: Arc::new(vec![0.5; n]),
            tokens: n,
            budget: 70,
            bytes: Arc::default(),
        }
    }

    #[test]
    fn lone_markers_become_runs_and_earlier_runs_stay() {
        // An earlier picture (8 9 9 7) and two new markers, side by side as the template
        // writes two pictures.
        let ids = [2, 8, 9, 9, 7, 5, 9, 9, 6];
        let (out, placed) =
            expand(&ids, 5, &spec(), &[picture(1, 1), picture(3, 2)]).expect("expands");
        assert_eq!(out, [2, 8, 9, 9, 7, 5, 8, 9, 7, 8, 9, 9, 9, 7, 6]);
        assert_eq!((placed[0].at, placed[1].at), (7, 10));
        let err = expand(&ids, 5, &spec(), &[picture(1, 1)]).expect_err("one marker too many");
        assert!(err.to_string().contains("2 image marker(s) for 1"), "{err}");
    }

    #[test]
    fn images_move_with_their_ids() {
        let old = [2, 4, 8, 9, 9, 7, 5];
        let images = [Image {
            at: 3,
            rows: Arc::new(vec![0.0; 2]),
            key: [1; 32],
            budget: 70,
        }];
        // A header one id longer: the picture moves with it.
        let new = [2, 4, 4, 8, 9, 9, 7, 5];
        let kept = carry(&images, 1, (&old, 2), (&new, 3));
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].at, 4);
        // Its place rewritten: dropped.
        let new = [2, 4, 3, 3, 3, 3];
        assert!(carry(&images, 1, (&old, 2), (&new, 2)).is_empty());
    }
}
