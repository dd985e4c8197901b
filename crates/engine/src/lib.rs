//! The engine side of gemma-chat: one engine thread ([`handle::spawn`], [`worker`]) owns the
//! weights and every tab ([`tabs`]) with its warm [`session`]; each turn is one [`turn::Turn`]
//! with its text in a [`reply::Reply`]; the UI talks to it only through [`protocol`], which
//! [`remote`] serves too, from an OpenAI-compatible server.

mod attach;
mod branch;
pub mod convo_store;
pub mod handle;
mod job;
pub mod kv_store;
mod options;
pub mod remote;
pub mod reply;
pub mod session;
pub mod stop_strings;
mod tabs;
pub mod thinking;
pub mod turn;
mod worker;

pub use gemma_protocol as protocol;
pub use gemma_protocol::{EngineControl, EngineHandle};
pub use handle::{Progress, spawn};
pub use options::EngineOptions;
pub use remote::{RemoteOptions, spawn_remote};
