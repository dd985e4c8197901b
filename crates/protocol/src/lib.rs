//! What every front end of gemma-chat (the TUI, `--prompt`, piped chat) and every engine (the
//! model in this process, an OpenAI-compatible server) say to each other: [`Command`]s in,
//! [`Event`]s out, each naming its tab ([`messages`]); a tab's settings, whole ([`tab_settings`]); the sampling parameters a tab's turns use
//! ([`sampling`]); the handle a front end holds on an engine thread ([`handle`]); and what of a
//! model's or a server's text may reach a terminal ([`text`]). Plain data and channels: this
//! crate depends on nothing, and everything else may depend on it.

pub mod context;
pub mod events;
pub mod handle;
pub mod messages;
pub mod sampling;
pub mod settings;
pub mod tab_settings;
pub mod text;
pub mod tools;

pub use context::{Compaction, DEFAULT_COMPACT_PROMPT, Overflow, OverflowMode, SUMMARY_LEAD};
pub use events::*;
pub use handle::{ENGINE_THREAD, EngineControl, EngineHandle, Interrupts};
pub use messages::*;
pub use sampling::{SamplingLayer, SamplingParams};
pub use settings::{
    Backend, Dtype, GpuWeights, KvDtype, Named, Speculate, ThinkingPolicy, UnknownName,
};
pub use tab_settings::{Capabilities, Refusal, SpecSupport, Speculation, TabSettings};
pub use tools::*;
