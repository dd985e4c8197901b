//! Pictures sent with a message: each file read within limits, cut into the patches of the
//! model's vision tower at its token budget and encoded ([`encode`]); each `<|image|>` the chat
//! template wrote for one expanded into begin-image, the picture's run of placeholders and
//! end-image ([`expand`]), as transformers' processor expands it; and a conversation's images
//! carried along when its ids move ([`carry`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use gemma_media::{Picture, picture::MAX_FILE};
use gemma_model::tokenizer::template::Media;
use gemma_model::vision::{PatchInput, VisionTower};

use super::images::{ImageKey, MediaSpan, image_key};
use super::protocol::MediaKind;

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
    /// The file's bytes, for the engine's copy (a recording's piece: its 16 kHz WAV file).
    pub bytes: Arc<Vec<u8>>,
    /// A picture or a piece of a recording.
    pub kind: MediaKind,
}

/// Reads, cuts and encodes the picture at `path` with `tower` at `budget` soft tokens at most.
pub fn encode(tower: &VisionTower, path: &Path, budget: usize) -> Result<Encoded> {
    let bytes = read(path, budget)?;
    encode_bytes(tower, bytes, &path.display().to_string(), budget).map(|e| Encoded {
        path: path.to_path_buf(),
        ..e
    })
}

/// The picture at `path` as a prompt places it before the tower runs (a conversation rebuilt
/// from its transcript): its soft tokens from its size at `budget`, its key from its bytes, no
/// rows (`Worker::fill_rows` encodes them from these bytes, and refuses a count the tower does
/// not confirm).
pub fn unencoded(path: &Path, budget: usize) -> Result<Encoded> {
    let bytes = read(path, budget)?;
    let tokens = gemma_media::soft_tokens(&bytes, budget).ok_or_else(|| {
        Error::Invalid(format!(
            "{}: its size cannot be read, or does not fit its budget",
            path.display()
        ))
    })?;
    Ok(Encoded {
        path: path.to_path_buf(),
        key: image_key(&bytes, budget),
        rows: Arc::default(),
        tokens,
        budget,
        bytes: Arc::new(bytes),
        kind: MediaKind::Image,
    })
}

/// The picture file at `path`, read within limits, for a `budget` Gemma 4 takes.
fn read(path: &Path, budget: usize) -> Result<Vec<u8>> {
    if !gemma_media::BUDGETS.contains(&budget) {
        return Err(Error::Invalid(format!(
            "{budget} image tokens is not a budget Gemma 4 takes: use 70, 140, 280, 560 or 1120"
        )));
    }
    gemma_files::read_limited(path, MAX_FILE)
        .map_err(|e| Error::Invalid(format!("cannot read the picture {}: {e}", path.display())))
}

/// [`encode`] of a picture's `bytes`; `name` names it in errors.
pub fn encode_bytes(
    tower: &VisionTower,
    bytes: Vec<u8>,
    name: &str,
    budget: usize,
) -> Result<Encoded> {
    let picture = Picture::decode(&bytes, name)?;
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
        kind: MediaKind::Image,
    })
}

/// The ids that make a picture's and a recording's run in a prompt: begin, placeholder, end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marks {
    /// `<|image>`, `<|image|>`, `<image|>`, where the model takes pictures.
    pub image: Option<[u32; 3]>,
    /// `<|audio>`, `<|audio|>`, `<audio|>`, where the model takes recordings.
    pub audio: Option<[u32; 3]>,
}

impl Marks {
    /// The marks of `kind`.
    pub fn of(&self, kind: MediaKind) -> Option<[u32; 3]> {
        match kind {
            MediaKind::Image => self.image,
            MediaKind::Audio => self.audio,
        }
    }

    /// The kind whose placeholder `id` is.
    fn kind_of(&self, id: u32) -> Option<MediaKind> {
        [MediaKind::Image, MediaKind::Audio]
            .into_iter()
            .find(|&k| self.of(k).is_some_and(|m| m[1] == id))
    }
}

/// `ids` with each placeholder from `from` on (the new turn, where the template wrote one per
/// picture and one per piece of a recording) replaced by the begin id, `encoded`'s run of
/// placeholders and the end id, the pictures in order for the image markers and the pieces in
/// order for the audio ones; and where each now lies. Refused when markers and attachments of a
/// kind differ in number (the text itself held `<|image|>` or `<|audio|>`).
pub fn expand(
    ids: &[u32],
    from: usize,
    marks: &Marks,
    encoded: &[Encoded],
) -> Result<(Vec<u32>, Vec<MediaSpan>)> {
    let marker = |i: usize| (i >= from).then(|| marks.kind_of(ids[i])).flatten();
    for (kind, what) in [
        (MediaKind::Image, "picture"),
        (MediaKind::Audio, "recording"),
    ] {
        let found = (from..ids.len())
            .filter(|&i| marker(i) == Some(kind))
            .count();
        let sent = encoded.iter().filter(|e| e.kind == kind).count();
        if found != sent {
            let tag = if kind == MediaKind::Image {
                "image"
            } else {
                "audio"
            };
            return Err(Error::Invalid(format!(
                "the message holds {found} {tag} marker(s) for {sent} {what}(s): remove \
                 `<|{tag}|>` from its text"
            )));
        }
    }
    let mut out =
        Vec::with_capacity(ids.len() + encoded.iter().map(|e| e.tokens + 2).sum::<usize>());
    let mut placed = Vec::with_capacity(encoded.len());
    let mut queues =
        [MediaKind::Image, MediaKind::Audio].map(|k| encoded.iter().filter(move |e| e.kind == k));
    for (i, &id) in ids.iter().enumerate() {
        let Some(kind) = marker(i) else {
            out.push(id);
            continue;
        };
        let [begin, placeholder, end] = marks.of(kind).expect("a marker's kind has marks");
        let e = queues[kind as usize].next().expect("counted above");
        out.push(begin);
        placed.push(MediaSpan {
            at: out.len(),
            rows: e.rows.clone(),
            tokens: e.tokens,
            key: e.key,
            budget: e.budget,
            kind,
            source: e.rows.is_empty().then(|| e.bytes.clone()),
        });
        out.extend(std::iter::repeat_n(placeholder, e.tokens));
        out.push(end);
    }
    Ok((out, placed))
}

/// The template's content items for `encoded`: one per picture and one per recording's piece.
pub fn media(encoded: &[Encoded]) -> Vec<Media> {
    encoded
        .iter()
        .map(|e| match e.kind {
            MediaKind::Image => Media::Image,
            MediaKind::Audio => Media::Audio,
        })
        .collect()
}

/// The spans `carried` from an earlier conversation, with those `placed` anew where none was
/// carried (a carried span keeps its rows), in prompt order.
pub fn merge(carried: Vec<MediaSpan>, placed: Vec<MediaSpan>) -> Vec<MediaSpan> {
    let mut out = carried;
    for p in placed {
        if !out.iter().any(|c| c.at == p.at) {
            out.push(p);
        }
    }
    out.sort_by_key(|s| s.at);
    out
}

/// The images of a conversation whose ids were `old` and are now `new`, the part after BOS and
/// the header (`old_base`, `new_base` ids in) kept where it is the same: an image survives when
/// its run, with the ids around it, is found unchanged at its new place.
pub fn carry(
    images: &[MediaSpan],
    hidden: usize,
    (old, old_base): (&[u32], usize),
    (new, new_base): (&[u32], usize),
) -> Vec<MediaSpan> {
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
            same.then(|| MediaSpan { at, ..i.clone() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks() -> Marks {
        Marks {
            image: Some([8, 9, 7]),
            audio: Some([10, 11, 12]),
        }
    }

    fn picture(n: usize, key: u8) -> Encoded {
        media(n, key, MediaKind::Image)
    }

    fn media(n: usize, key: u8, kind: MediaKind) -> Encoded {
        Encoded {
            path: PathBuf::from("p.png"),
            key: [key; 32],
            rows: Arc::new(vec![0.5; n]),
            tokens: n,
            budget: 70,
            bytes: Arc::default(),
            kind,
        }
    }

    #[test]
    fn lone_markers_become_runs_and_earlier_runs_stay() {
        // An earlier picture (8 9 9 7) and two new markers, side by side as the template
        // writes two pictures.
        let ids = [2, 8, 9, 9, 7, 5, 9, 9, 6];
        let (out, placed) =
            expand(&ids, 5, &marks(), &[picture(1, 1), picture(3, 2)]).expect("expands");
        assert_eq!(out, [2, 8, 9, 9, 7, 5, 8, 9, 7, 8, 9, 9, 9, 7, 6]);
        assert_eq!((placed[0].at, placed[1].at), (7, 10));
        let err = expand(&ids, 5, &marks(), &[picture(1, 1)]).expect_err("one marker too many");
        assert!(err.to_string().contains("2 image marker(s) for 1"), "{err}");
    }

    #[test]
    fn pictures_and_recordings_fill_their_own_markers() {
        // The template wrote a picture, then two pieces of a recording, then the text (5).
        let ids = [2, 9, 11, 11, 5];
        let sent = [
            media(2, 3, MediaKind::Audio),
            picture(1, 1),
            media(1, 4, MediaKind::Audio),
        ];
        let (out, placed) = expand(&ids, 1, &marks(), &sent).expect("expands");
        assert_eq!(out, [2, 8, 9, 7, 10, 11, 11, 12, 10, 11, 12, 5]);
        let kinds: Vec<_> = placed.iter().map(|p| (p.at, p.key[0], p.kind)).collect();
        assert_eq!(
            kinds,
            [
                (2, 1, MediaKind::Image),
                (5, 3, MediaKind::Audio),
                (9, 4, MediaKind::Audio)
            ]
        );
        // A recording for a model whose marks have none, or a typed marker too many.
        let err = expand(&ids, 1, &marks(), &sent[..2]).expect_err("a piece short");
        assert!(
            err.to_string()
                .contains("2 audio marker(s) for 1 recording"),
            "{err}"
        );
        let no_audio = Marks {
            audio: None,
            ..marks()
        };
        let err = expand(&[2, 9, 5], 1, &no_audio, &sent).expect_err("no audio marks");
        assert!(err.to_string().contains("0 audio marker(s) for 2"), "{err}");
    }

    #[test]
    fn images_move_with_their_ids() {
        let old = [2, 4, 8, 9, 9, 7, 5];
        let images = [MediaSpan {
            source: None,
            at: 3,
            rows: Arc::new(vec![0.0; 2]),
            tokens: 2,
            key: [1; 32],
            budget: 70,
            kind: MediaKind::Image,
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
