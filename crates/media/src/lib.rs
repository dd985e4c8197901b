//! Pictures and sound as gemma-chat's model towers take them, exactly as transformers' processors
//! prepare them. Plain data in and out: this crate knows no model, engine or front end.
//!
//! - Pictures: a file decoded within limits and made upright ([`picture`]), resized as PIL
//!   resizes ([`resample`]), then cut into the patches a vision tower embeds ([`patches`]).
//! - Sound: a WAV, FLAC, MP3 or OGG Vorbis file (or a recording's samples) decoded within limits,
//!   mixed to mono and resampled to 16 kHz ([`audio`]), cut into 30-second pieces, each turned into
//!   the log-mel features and soft-token count of transformers' Gemma 4 ([`audio::features`]).

pub mod audio;
pub mod patches;
pub mod picture;
pub mod resample;

pub use audio::{AudioError, Clip, Features};
pub use patches::{BUDGETS, PATCH, POOL, Patches, patches, patches_of};
pub use picture::{Picture, PictureError, soft_tokens};
