//! A rebuilt exchange's pictures and recordings as a prompt places them before any tower runs
//! ([`unencoded`]): a picture's soft tokens from its size at its budget and its key from its
//! bytes, a recording cut into its 30-second pieces with each piece's tokens from its length, as
//! the towers would make them. Their rows are encoded only when a prefill reaches them
//! (`Worker::fill_rows`), from the bytes carried here; a count the tower does not confirm is
//! refused there, never fed.

use std::sync::Arc;

use crate::error::{Error, Result};
use gemma_media::audio::{self, Clip};
use gemma_media::picture::MAX_FILE;

use super::images::image_key;
use super::pictures::Encoded;
use super::protocol::{Attachment, MediaKind};

/// `a` as the prompt places it, without its rows: one entry for a picture, one per piece of a
/// recording.
pub fn unencoded(a: &Attachment) -> Result<Vec<Encoded>> {
    match a.kind {
        MediaKind::Image => picture(a).map(|e| vec![e]),
        MediaKind::Audio => recording(a),
    }
}

fn picture(a: &Attachment) -> Result<Encoded> {
    let name = a.path.display();
    if !gemma_media::BUDGETS.contains(&a.tokens) {
        return Err(Error::Invalid(format!(
            "{name}: {} image tokens is not a budget Gemma 4 takes",
            a.tokens
        )));
    }
    let bytes = gemma_files::read_limited(&a.path, MAX_FILE)
        .map_err(|e| Error::Invalid(format!("cannot read the picture {name}: {e}")))?;
    let tokens = gemma_media::soft_tokens(&bytes, a.tokens).ok_or_else(|| {
        Error::Invalid(format!(
            "{name}: its size cannot be read, or does not fit its budget"
        ))
    })?;
    Ok(Encoded {
        path: a.path.clone(),
        key: image_key(&bytes, a.tokens),
        rows: Arc::default(),
        tokens,
        budget: a.tokens,
        bytes: Arc::new(bytes),
        kind: MediaKind::Image,
    })
}

fn recording(a: &Attachment) -> Result<Vec<Encoded>> {
    let name = a.path.display().to_string();
    super::sounds::pieces(&a.path)?
        .into_iter()
        .map(|wav| {
            let samples = Clip::decode(&wav, &name)?.samples().len();
            let tokens = audio::audio_tokens(samples);
            if tokens == 0 {
                return Err(Error::Invalid(format!(
                    "{name} is too short to hear: it makes no audio token"
                )));
            }
            Ok(Encoded {
                path: a.path.clone(),
                key: image_key(&wav, 0),
                rows: Arc::default(),
                tokens,
                budget: 0,
                bytes: Arc::new(wav),
                kind: MediaKind::Audio,
            })
        })
        .collect()
}
