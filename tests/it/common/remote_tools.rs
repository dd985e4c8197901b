//! The remote engine with tools, for the tests: a host with the test MCP server
//! (`tests/fixtures/mcp/server.py`), the engine on a server with that host, and one turn
//! followed to its end, each call that waits answered as the test says.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gemma_engine::protocol::TabSettings;
use gemma_engine::protocol::{
    Command, Event, TabId, ToolCall, ToolChoice, ToolDecision, ToolOutcome, TurnEnd, TurnStats,
};
use gemma_engine::{EngineHandle, RemoteOptions, SharedTools, spawn_remote};
use gemma_tools::config::Limits;
use gemma_tools::host::ToolHost;

/// A started host with the test MCP server (as `test`), at most `max_calls` calls a turn.
pub fn host(log: &Path, max_calls: usize) -> Arc<ToolHost> {
    let limits = Limits {
        max_calls,
        call_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    super::mcp::host(log, limits)
}

/// The remote engine's options for the tests' servers at `url`: `model` (`None`: the first
/// listed), 5 s to connect, 120 s to the first byte and between events, no tools.
pub fn options(url: String, model: Option<&str>) -> RemoteOptions {
    RemoteOptions {
        url,
        model: model.map(String::from),
        api_key: None,
        connect_timeout: Duration::from_secs(5),
        first_byte_timeout: Duration::from_secs(120),
        idle_timeout: Duration::from_secs(120),
        give_up_after: None,
        context_length: None,
        tools: None,
        thinking_message: None,
    }
}

/// The remote engine on 127.0.0.1:`port` (serving `model`) with `host`'s tools, ready; tab 1
/// greedy, all tools declared, `choice`.
pub fn engine(port: u16, model: &str, host: Arc<ToolHost>, choice: ToolChoice) -> EngineHandle {
    let h = spawn_remote(RemoteOptions {
        tools: Some(SharedTools(host)),
        ..options(format!("http://127.0.0.1:{port}"), Some(model))
    });
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("ready")
        {
            Event::Loading { .. } => {}
            Event::Ready { .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    let settings = TabSettings {
        max_new_tokens: 64,
        tool_choice: choice,
        ..TabSettings::default()
    };
    super::chat::configure(&h, 1, settings);
    h
}

/// What one turn of tab 1 showed.
#[derive(Debug, Default)]
pub struct Seen {
    pub calls: Vec<(ToolCall, bool)>,
    pub results: Vec<ToolOutcome>,
    pub answer: String,
    pub end: Option<Result<(TurnEnd, TurnStats), String>>,
}

/// Sends `text` to tab 1 and follows the turn, answering each call that waits with `decide`.
pub fn turn(h: &EngineHandle, text: &str, decide: &mut dyn FnMut(&ToolCall) -> Command) -> Seen {
    h.send(Command::Submit {
        tab: 1,
        text: text.into(),
        images: Vec::new(),
    });
    let mut seen = Seen::default();
    while seen.end.is_none() {
        match h
            .events
            .recv_timeout(Duration::from_secs(180))
            .expect("the turn goes on")
        {
            Event::ToolCall { call, approval, .. } => {
                if approval {
                    h.send(decide(&call));
                }
                seen.calls.push((call, approval));
            }
            Event::ToolResult { outcome, .. } => seen.results.push(outcome),
            Event::Token { text, .. } => seen.answer.push_str(&text),
            Event::Finished { end, stats, .. } => seen.end = Some(Ok((end, stats))),
            Event::Failed { error, .. } => seen.end = Some(Err(error)),
            _ => {}
        }
    }
    seen
}

pub fn decide(tab: TabId, decision: ToolDecision) -> impl FnMut(&ToolCall) -> Command {
    move |c| Command::DecideTool {
        tab,
        call: c.id,
        decision: decision.clone(),
    }
}
