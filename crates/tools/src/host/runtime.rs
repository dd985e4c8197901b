//! The tool thread's side: a single-threaded tokio runtime that starts every enabled server
//! ([`serve`]: plan, connect, list, then watch for its exit, its closing and its
//! `tools/list_changed`), and runs each call as a task ([`call`]) bounded by the call time-out
//! and stopped when its [`super::PendingCall`] is cancelled or dropped. When the host is dropped
//! the request channel closes, the runtime shuts down, and every child is killed.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

use super::CallResult;
use super::state::Shared;
use crate::builtin::Builtins;
use crate::config::{Limits, ServerConfig};
use crate::mcp::{self, Handler, McpError, ToolAnswer};

/// The longest wait for the runtime's tasks when the host is dropped.
const SHUTDOWN: Duration = Duration::from_secs(2);

/// A call handed to the tool thread.
pub struct Request {
    /// The server's index in the state.
    pub server: usize,
    /// The server's own name for the tool.
    pub tool: String,
    /// The arguments as the model gave them.
    pub arguments: Map<String, Value>,
    /// Where the result goes.
    pub reply: std::sync::mpsc::Sender<CallResult>,
    /// Resolves (or is dropped) when the caller stops the call.
    pub stop: oneshot::Receiver<()>,
    /// When the caller asked.
    pub started: Instant,
}

/// A server to start: its index in the state and its config.
pub type Job = (usize, ServerConfig);

/// Runs the tool thread until `requests` closes.
pub fn run(
    shared: Arc<Shared>,
    builtins: Arc<Builtins>,
    jobs: Vec<Job>,
    limits: Limits,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            for (index, _) in jobs {
                shared.fail(index, format!("the tool thread cannot start: {e}"));
            }
            return;
        }
    };
    runtime.block_on(async {
        for (index, config) in jobs {
            tokio::spawn(serve(Arc::clone(&shared), index, config, limits.clone()));
        }
        while let Some(request) = requests.recv().await {
            tokio::spawn(call(
                Arc::clone(&shared),
                Arc::clone(&builtins),
                request,
                limits.clone(),
            ));
        }
    });
    runtime.shutdown_timeout(SHUTDOWN);
}

/// Starts server `index`, lists its tools, then watches it until it exits or closes.
async fn serve(shared: Arc<Shared>, index: usize, config: ServerConfig, limits: Limits) {
    let env = |name: &str| std::env::var(name).ok();
    let plan = match mcp::plan(&config, &env) {
        Ok(plan) => plan,
        Err(e) => return shared.fail(index, e.to_string()),
    };
    let deadline = Instant::now() + limits.start_timeout;
    let (changed_tx, mut changed) = mpsc::unbounded_channel();
    let connection = match mcp::open(plan, Handler::new(changed_tx), limits.start_timeout).await {
        Ok(connection) => connection,
        Err(e) => return shared.fail(index, e.to_string()),
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    let peer = connection.service.peer().clone();
    match mcp::list_tools(&peer, left.min(limits.call_timeout)).await {
        Ok(tools) => shared.ready(index, Some(peer.clone()), tools),
        Err(e) => return shared.fail(index, format!("{e}{}", connection.stderr_note())),
    }
    let mcp::Connection {
        service,
        mut child,
        stderr,
    } = connection;
    let note = || {
        stderr
            .as_deref()
            .map(mcp::stdio::stderr_note)
            .unwrap_or_default()
    };
    let mut closed = pin!(service.waiting());
    loop {
        tokio::select! {
            status = exited(&mut child) => {
                return shared.fail(index, format!("the server exited ({status}){}", note()));
            }
            _ = &mut closed => {
                let status = match child.as_mut() {
                    Some(c) => tokio::time::timeout(Duration::from_millis(500), c.wait()).await.ok(),
                    None => None,
                };
                let status = status.and_then(Result::ok).map(|s| format!(" ({s})")).unwrap_or_default();
                let why = McpError::Closed(format!("{status}{}", note()));
                return shared.fail(index, why.to_string());
            }
            Some(()) = changed.recv() => match mcp::list_tools(&peer, limits.call_timeout).await {
                Ok(tools) => shared.ready(index, Some(peer.clone()), tools),
                Err(e) => return shared.fail(index, format!("{e}{}", note())),
            },
        }
    }
}

/// Resolves when `child` exits, with its status (never, for no child).
async fn exited(child: &mut Option<Child>) -> String {
    match child {
        Some(child) => match child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("cannot wait for it: {e}"),
        },
        None => std::future::pending().await,
    }
}

/// Runs one call and sends its result.
async fn call(shared: Arc<Shared>, builtins: Arc<Builtins>, request: Request, limits: Limits) {
    let Request {
        server,
        tool,
        arguments,
        reply,
        stop,
        started,
    } = request;
    let stop = async {
        let _ = stop.await;
    };
    let (name, peer) = {
        let state = shared.lock();
        let server = state.servers.get(server);
        (
            server.map(|s| s.name.clone()),
            server.and_then(|s| s.peer.clone()),
        )
    };
    let timeout = limits.call_timeout;
    let answer = match peer {
        Some(peer) => mcp::call_tool(&peer, &tool, arguments, timeout, stop).await,
        None if server == 0 && name.as_deref() == Some(crate::config::BUILTIN_SERVER) => {
            tokio::select! {
                answer = tokio::time::timeout(timeout, builtins.call(&tool, &arguments)) => match answer {
                    Ok(Ok(text)) => Ok(ToolAnswer { ok: true, text, structured: None }),
                    Ok(Err(e)) => Err(McpError::Protocol(e.to_string())),
                    Err(_) => Err(McpError::Timeout { what: "the tool call", secs: timeout.as_secs_f64() }),
                },
                () = stop => Err(McpError::Stopped),
            }
        }
        None => Err(McpError::Start(format!(
            "the server `{}` is not running",
            name.unwrap_or_default()
        ))),
    };
    // What the server sends back never carries what it was handed (taken out before the cut,
    // so that no half of one is left at the end).
    let secrets = &shared.secrets;
    let result = match answer {
        Ok(mut answer) => {
            answer.text = secrets.redact(&answer.text);
            if let Some(map) = answer.structured.take() {
                let mut v = Value::Object(map);
                secrets.redact_json(&mut v);
                answer.structured = match v {
                    Value::Object(m) => Some(m),
                    _ => None,
                };
            }
            CallResult::answer(answer, limits.max_result_bytes, started)
        }
        Err(e) => CallResult::failure(secrets.redact(&e.to_string()), started),
    };
    let _ = reply.send(result);
}
