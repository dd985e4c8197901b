//! The engines behind `gemma_protocol`: one engine thread ([`spawn`]; `worker`) owns the weights
//! and every tab (`tabs`) with its warm [`session`]; each turn is one [`turn::Turn`] with its
//! text in a [`reply::Reply`]; front ends talk to it only through the [`protocol`], which
//! [`remote`] serves too, from an OpenAI-compatible server ([`spawn_remote`]).
//!
//! | I want to… | Go to |
//! |---|---|
//! | change how a turn prefills, decodes or ends | `turn.rs` (ids), `reply.rs` (text, thoughts, stop strings) |
//! | change how a token is picked, or speculative decoding | `turn/pick.rs`, `turn/verify.rs` (checks), `speculate.rs` (drafts, when to stop) |
//! | change how tool calls and responses are written in ids (live and rebuilt) | `tools/text.rs` |
//! | change the thought budget (bias, forced close) | `budget.rs` |
//! | fix history reuse, rewinds or memory across tabs | `session.rs`, `tabs.rs`, the model crate's `model/kv_cache/` |
//! | fix streaming, cancel or tab scheduling | `worker.rs`, `job.rs` |
//! | use a new tab setting (a field of `gemma_protocol::TabSettings`) | `worker.rs` `configure`, `remote/serve.rs` `configure`, where the turn reads it |
//! | change how a transcript is rendered again (branches, imports, compaction), its media placed | `branch.rs`, `attach.rs`, `pictures.rs`/`sounds.rs` `unencoded` |
//! | change the engine's limits and policies | `options.rs` |
//! | change what a failed command or turn says, or add a kind of failure | `error.rs` |
//! | change how a turn calls tools (guide, approvals, responses) | `tools/`, `worker/tool_calls.rs` |

mod attach;
mod branch;
pub mod budget;
mod compact;
pub mod convo_store;
pub mod error;
pub mod handle;
pub mod images;
mod job;
pub mod kv_store;
mod options;
pub mod pictures;
pub mod remote;
pub mod reply;
pub mod session;
pub mod sounds;
pub mod speculate;
pub mod stop_strings;
mod tabs;
pub mod thinking;
pub mod tools;
pub mod turn;
mod worker;

pub use gemma_protocol as protocol;
pub use gemma_protocol::{EngineControl, EngineHandle};
pub use handle::{Progress, spawn};
pub use options::EngineOptions;
pub use remote::{RemoteOptions, spawn_remote};
pub use tools::SharedTools;
