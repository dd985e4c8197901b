//! Pictures (and, later, sound) as gemma-chat's model towers take them: a file decoded within
//! limits and made upright ([`picture`]), resized as PIL resizes ([`resample`]), then cut into
//! the patches a vision tower embeds ([`patches`]), exactly as transformers' processors prepare
//! them. Plain data in and out: this
//! crate knows no model, engine or front end.

pub mod patches;
pub mod picture;
pub mod resample;

pub use patches::{BUDGETS, PATCH, POOL, Patches, patches, patches_of};
pub use picture::{Picture, PictureError};
