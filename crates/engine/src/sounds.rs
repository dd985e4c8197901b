//! Recordings sent with a message: each file decoded and resampled to 16 kHz mono
//! (`gemma_media::audio`), cut into 30-second pieces, and each piece's log-mel features encoded
//! by the model's audio tower ([`encode`]). A piece is its own audio span in the prompt, with an
//! identity of its own: the key of its samples written as a WAV file, which is also the copy
//! the engine keeps with the conversation, so that a restart encodes exactly those samples
//! again ([`encode_piece`]).

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use gemma_media::audio::{self, Clip};
use gemma_model::audio::AudioTower;

use super::images::image_key;
use super::pictures::Encoded;
use super::protocol::MediaKind;

/// The pieces of the recording at `path`, each encoded by `tower`; refused with [`STOPPED`] when
/// `stopped` says so before a piece.
pub fn encode(tower: &AudioTower, path: &Path, stopped: &dyn Fn() -> bool) -> Result<Vec<Encoded>> {
    pieces(path)?
        .into_iter()
        .map(|wav| {
            if stopped() {
                return Err(Error::Invalid(STOPPED.into()));
            }
            encode_from(tower, wav, path)
        })
        .collect()
}

/// The recording at `path` decoded, resampled and cut into 30-second pieces, each as the WAV
/// file of its 16 kHz samples (what [`encode_from`] takes and the conversation keeps).
pub fn pieces(path: &Path) -> Result<Vec<Vec<u8>>> {
    Ok(counted_pieces(path)?
        .into_iter()
        .map(|(wav, _)| wav)
        .collect())
}

/// [`pieces`], each with its number of samples.
fn counted_pieces(path: &Path) -> Result<Vec<(Vec<u8>, usize)>> {
    let clip = Clip::open(path)?;
    clip.pieces()
        .map(|piece| {
            Clip::from_samples(piece, audio::SAMPLE_RATE, 1)
                .map(|c| (c.to_wav(), piece.len()))
                .map_err(Error::from)
        })
        .collect()
}

/// The recording at `path` as a prompt places it before the tower runs (a conversation rebuilt
/// from its transcript): a piece each, its soft tokens from its length (as the tower makes
/// them), its key from its WAV, no rows (`Worker::fill_rows` encodes them from the WAV, and
/// refuses a count the tower does not confirm).
pub fn unencoded(path: &Path) -> Result<Vec<Encoded>> {
    let name = path.display().to_string();
    counted_pieces(path)?
        .into_iter()
        .map(|(wav, samples)| {
            let tokens = audio::audio_tokens(samples);
            if tokens == 0 {
                return Err(too_short(&name));
            }
            Ok(Encoded {
                path: path.to_path_buf(),
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

/// A piece that makes no audio token.
fn too_short(name: &str) -> Error {
    Error::Invalid(format!(
        "{name} is too short to hear: it makes no audio token"
    ))
}

/// One piece of the recording at `path` (a WAV of [`pieces`]) encoded by `tower`.
pub fn encode_from(tower: &AudioTower, wav: Vec<u8>, path: &Path) -> Result<Encoded> {
    let mut e = encode_piece(tower, wav, &path.display().to_string())?;
    e.path = path.to_path_buf();
    Ok(e)
}

/// Why a message whose pictures or recordings were being encoded was not sent: it was stopped.
pub const STOPPED: &str = "stopped while its pictures or recordings were encoded: nothing was \
    sent to the model";

/// One piece, given as the WAV file of its 16 kHz samples (as [`encode`] keeps it); `name`
/// names it in errors.
pub fn encode_piece(tower: &AudioTower, wav: Vec<u8>, name: &str) -> Result<Encoded> {
    let clip = Clip::decode(&wav, name)?;
    let samples = clip.samples();
    if samples.len() > audio::PIECE_SAMPLES {
        return Err(Error::Invalid(format!(
            "{name}: a piece of {} samples is longer than 30 seconds",
            samples.len()
        )));
    }
    let f = audio::features(samples);
    let rows = tower.encode(&f.values, &f.mask)?;
    let hidden = tower.spec().text_hidden.max(1);
    let tokens = rows.len() / hidden;
    if tokens == 0 {
        return Err(too_short(name));
    }
    Ok(Encoded {
        path: name.into(),
        key: image_key(&wav, 0),
        tokens,
        rows: Arc::new(rows),
        budget: 0,
        bytes: Arc::new(wav),
        kind: MediaKind::Audio,
    })
}
