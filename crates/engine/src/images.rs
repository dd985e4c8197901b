//! Images (and pieces of recordings) in a conversation's ids: each one a run of placeholder ids
//! whose embeddings its soft tokens replace ([`MediaSpan`]), identified by its content (the file's
//! bytes and the token budget) and not by those ids, which every image of the same size shares.
//! A session keeps the identity of the images it holds, so that a follow-up reuses an image's
//! keys and values only when it is the same picture at the same place ([`shared`]), and a turn
//! never splits an image across two forward steps ([`chunk_end`]): a bidirectional image must
//! be in one.

use std::ops::Range;
use std::sync::Arc;

use gemma_model::model::Soft;
use gemma_protocol::MediaKind;
use sha2::{Digest, Sha256};

/// What identifies an image's keys and values: SHA-256 of its file's bytes and its budget.
pub type ImageKey = [u8; 32];

/// A key as lowercase hex (a stored picture's file name).
pub fn key_hex(key: &ImageKey) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The identity of a picture's bytes at a token budget.
pub fn image_key(bytes: &[u8], budget: usize) -> ImageKey {
    let mut h = Sha256::new();
    h.update(bytes);
    h.update(b"\0budget=");
    h.update(budget.to_le_bytes());
    h.finalize().into()
}

/// One picture's or one recording piece's soft tokens in a prompt: its span of placeholders.
#[derive(Debug, Clone)]
pub struct MediaSpan {
    /// Position of its first placeholder in the prompt.
    pub at: usize,
    /// `tokens × H` values from the tower; empty until a prefill needs them (a conversation
    /// brought back warm holds its pictures' places and keys, not their rows: see
    /// `Worker::fill_rows`).
    pub rows: Arc<Vec<f32>>,
    /// Its placeholders.
    pub tokens: usize,
    /// Its identity.
    pub key: ImageKey,
    /// The budget it was encoded at (soft tokens at most; 0 for a recording).
    pub budget: usize,
    /// A picture or a piece of a recording.
    pub kind: MediaKind,
    /// The file its rows are to be encoded from, while they are pending and the conversation's
    /// store may not hold it (a conversation rebuilt from a transcript's pictures).
    pub source: Option<Arc<Vec<u8>>>,
}

impl MediaSpan {
    /// The positions it fills (`hidden`, the model's width, is kept for the callers' sake).
    pub fn span(&self, _hidden: usize) -> Range<usize> {
        self.at..self.at + self.tokens
    }

    /// Whether its rows are still to be encoded.
    pub fn pending(&self) -> bool {
        self.rows.is_empty() && self.tokens > 0
    }
}

/// An image the session holds: its positions and identity.
pub type Held = (Range<usize>, ImageKey);

/// How much of `common` (the ids the session and the prompt share) may be reused: up to the
/// first image either side has there that the other lacks (another picture, or a different
/// place), and never into the middle of an image.
pub(crate) fn shared(held: &[Held], prompt: &[MediaSpan], hidden: usize, common: usize) -> usize {
    let mut keep = common;
    for (span, key) in held {
        let same = prompt
            .iter()
            .any(|i| i.span(hidden) == *span && i.key == *key);
        if span.start < keep && (!same || span.end > keep) {
            keep = span.start;
        }
    }
    for i in prompt {
        let span = i.span(hidden);
        let same = held.iter().any(|(s, k)| *s == span && *k == i.key);
        if span.start < keep && (!same || span.end > keep) {
            keep = span.start;
        }
    }
    keep
}

/// Where a forward step from `from` that would end at `to` ends instead so that no image is
/// split: before the first image it would cut, or after it when the step starts there (an image
/// longer than the chunk is one step).
pub fn chunk_end(images: &[MediaSpan], hidden: usize, from: usize, to: usize) -> usize {
    for i in images {
        let span = i.span(hidden);
        if span.start < to && to < span.end {
            return if span.start > from {
                span.start
            } else {
                span.end
            };
        }
    }
    to
}

/// The soft tokens of the images in `from..to`, offsets relative to `from`.
pub(crate) fn softs<'a>(
    images: &'a [MediaSpan],
    hidden: usize,
    from: usize,
    to: usize,
) -> Vec<Soft<'a>> {
    images
        .iter()
        .filter(|i| {
            let s = i.span(hidden);
            s.start >= from && s.end <= to
        })
        .map(|i| Soft {
            at: i.at - from,
            rows: &i.rows,
            causal: i.kind == MediaKind::Audio,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(at: usize, n: usize, key: u8) -> MediaSpan {
        MediaSpan {
            source: None,
            at,
            rows: Arc::new(vec![0.0; n * 2]),
            tokens: n,
            key: [key; 32],
            budget: 70,
            kind: MediaKind::Image,
        }
    }

    #[test]
    fn reuse_stops_at_a_different_picture() {
        let held = vec![(3..6, [1; 32]), (8..10, [2; 32])];
        // The same pictures at the same places: everything.
        assert_eq!(shared(&held, &[image(3, 3, 1), image(8, 2, 2)], 2, 12), 12);
        // The second picture changed: up to it.
        assert_eq!(shared(&held, &[image(3, 3, 1), image(8, 2, 9)], 2, 12), 8);
        // Text where a picture was, or a picture where text was.
        assert_eq!(shared(&held, &[image(3, 3, 1)], 2, 12), 8);
        assert_eq!(shared(&[], &[image(3, 3, 1)], 2, 12), 3);
        // Never into an image's middle.
        assert_eq!(shared(&held, &[image(3, 3, 1), image(8, 2, 2)], 2, 9), 8);
    }

    #[test]
    fn steps_never_split_an_image() {
        let images = [image(4, 6, 1)];
        assert_eq!(chunk_end(&images, 2, 0, 3), 3);
        assert_eq!(chunk_end(&images, 2, 0, 6), 4);
        assert_eq!(chunk_end(&images, 2, 4, 6), 10);
        assert_eq!(chunk_end(&images, 2, 4, 12), 12);
        let s = softs(&images, 2, 4, 12);
        assert_eq!((s.len(), s[0].at), (1, 0));
        assert!(softs(&images, 2, 0, 4).is_empty());
    }
}
