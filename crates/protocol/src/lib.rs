//! What every front end of gemma-chat (the TUI, `--prompt`, piped chat) and every engine (the
//! model in this process, an OpenAI-compatible server) say to each other: [`Command`]s in,
//! [`Event`]s out, each naming its tab ([`messages`]); the sampling parameters a tab's turns use
//! ([`sampling`]); and the handle a front end holds on an engine thread ([`handle`]). Plain data
//! and channels: this crate depends on nothing, and everything else may depend on it.

pub mod handle;
pub mod messages;
pub mod sampling;

pub use handle::{ENGINE_THREAD, EngineControl, EngineHandle};
pub use messages::*;
pub use sampling::{SamplingLayer, SamplingParams};
