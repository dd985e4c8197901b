//! The engine's errors ([`Error`]), by kind: what a command or a turn can fail with. The front
//! end is told each as a sentence (`Event::Failed`); the kinds are for the engine's callers and
//! tests, which need not read the sentence to know what happened.

use crate::protocol::MediaKind;
use gemma_media::audio::AudioError;
use gemma_media::picture::PictureError;

/// What an engine command or turn failed with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command that needs the tab idle came while a turn (or its media's encoding) runs.
    #[error("a turn is still running in this tab; stop it first")]
    Busy,
    /// A turn's prompt does not fit the tab's context.
    #[error(
        "context length exceeded: {needed} tokens needed, the limit is {limit}; start a new chat \
         or raise context_length"
    )]
    ContextFull {
        /// Tokens the turn needs (its prompt and one answer token).
        needed: usize,
        /// The tab's limit.
        limit: usize,
    },
    /// Media of a kind this model has no tower for.
    #[error("{}", no_tower(*.kind, .why))]
    NoTower {
        /// Pictures or recordings.
        kind: MediaKind,
        /// Why there is none (no mmproj, no audio config, a tower that failed to load).
        why: String,
    },
    /// A picture that cannot be read or decoded.
    #[error(transparent)]
    Picture(#[from] PictureError),
    /// A recording that cannot be read or decoded.
    #[error(transparent)]
    Audio(#[from] AudioError),
    /// The model, its tokenizer or its template failed.
    #[error(transparent)]
    Model(#[from] gemma_model::error::Error),
    /// A command or its input the engine refuses, with the reason.
    #[error("{0}")]
    Invalid(String),
}

/// The engine's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn no_tower(kind: MediaKind, why: &str) -> String {
    match kind {
        MediaKind::Image => format!("this model cannot take pictures: {why}"),
        MediaKind::Audio => {
            format!("this model cannot hear recordings (Gemma 4 E2B and E4B can): {why}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_says_what_to_do() {
        assert!(Error::Busy.to_string().contains("stop it first"));
        let e = Error::NoTower {
            kind: MediaKind::Audio,
            why: "no audio_config".into(),
        };
        assert_eq!(
            e.to_string(),
            "this model cannot hear recordings (Gemma 4 E2B and E4B can): no audio_config"
        );
        let e = Error::NoTower {
            kind: MediaKind::Image,
            why: "no mmproj".into(),
        };
        assert_eq!(e.to_string(), "this model cannot take pictures: no mmproj");
    }
}
