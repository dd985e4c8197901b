//! The remote engine: the same [`Command`]s in and [`Event`]s out as the local engine, served by
//! an OpenAI-compatible server (llama-server, with RPC workers or not; vLLM; SGLang). The engine
//! thread runs a single-threaded tokio runtime: it finds out what the server is ([`client`],
//! [`start`]), keeps each tab's conversation as text ([`serve`], [`tab`]), and streams each turn
//! as a task of its own ([`turn`]), re-sending the whole conversation byte-identically so the
//! server's prefix cache holds; with llama-server each tab is pinned to a slot. Tools go as
//! OpenAI `tools`; the calls an answer makes ([`calls`]) run through the local engine's approval
//! and host path and their results go back as `tool` messages ([`tooling`]). The wire format is
//! [`wire`]'s.

mod answer;
pub mod calls;
pub mod client;
mod compact;
pub mod info;
mod limits;
mod serve;
pub mod sse;
mod start;
mod tab;
mod tooling;
mod turn;
pub mod wire;

use std::time::Duration;

use super::handle::start;
use super::protocol::EngineHandle;
use super::protocol::{Command, Event};

/// Where the server is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOptions {
    /// The server's base URL, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// The model to ask for (`None`: the first the server lists).
    pub model: Option<String>,
    /// The API key (read by the caller from the environment variable the config names; never
    /// written anywhere).
    pub api_key: Option<String>,
    /// Time to connect.
    pub connect_timeout: Duration,
    /// Time from a request to the head of its answer.
    pub first_byte_timeout: Duration,
    /// Time a started answer, or a request's body, may go without news.
    pub idle_timeout: Duration,
    /// How long to keep trying a server that is down or loading at start (`None`: until the
    /// front end shuts the engine down, as the TUI does; headless runs give up).
    pub give_up_after: Option<Duration>,
    /// Context per tab when the server does not say (vLLM without `max_model_len`).
    pub context_length: Option<usize>,
    /// The tools the model may call (MCP servers and built-ins), started by the front end.
    pub tools: Option<crate::tools::SharedTools>,
    /// Written before the close a thought budget forces, where the server enforces budgets
    /// (`None`: the server's own).
    pub thinking_message: Option<String>,
}

/// Starts the remote engine's thread.
pub fn spawn_remote(options: RemoteOptions) -> EngineHandle {
    // A remote turn is a task of its own: a cancel reaches it through the command queue.
    start(move |events, commands, _interrupts| {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                let _ = events.send(Event::LoadFailed {
                    error: format!("cannot start the remote engine: {e}"),
                });
                return;
            }
        };
        // The UI's commands come over a std channel: a thread hands them to the runtime.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Command>();
        std::thread::spawn(move || {
            while let Ok(c) = commands.recv() {
                let last = c == Command::Shutdown;
                if tx.send(c).is_err() || last {
                    break;
                }
            }
        });
        runtime.block_on(serve::serve(options, events, rx));
    })
}
