//! One MCP server, as rmcp's client sees it: connecting over stdio ([`stdio`]) or
//! streamable HTTP ([`streamable`]) with the initialize handshake ([`plan`], [`open`]), listing its
//! tools page by page ([`list_tools`]) and calling one ([`call_tool`]), each request bounded in
//! time and cancellable. Requests go out as raw JSON-RPC and their results are read leniently
//! here, so a server that lies (an `inputSchema` that is not an object, a content kind this
//! client does not know) gets a clear error or a placeholder rather than a dropped message.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::model::{
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest, CustomRequest,
    Implementation, RequestId,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedSender;

use crate::config::ServerConfig;
use crate::host::clean;
use stdio::{Spawned, StderrTail, stderr_note};

mod answer;
mod guard;
mod prune;
pub use prune::TOO_DEEP_KEY;
pub mod stdio;
pub mod streamable;

pub use answer::read_answer;

/// Most bytes of one protocol message read from a stdio server.
pub const MAX_MESSAGE: usize = 8 << 20;
/// Most tools believed of one server.
pub const MAX_TOOLS: usize = 256;
/// Most pages of a tool list read.
pub const MAX_PAGES: usize = 16;
/// Most bytes of a server's error message quoted.
pub const MAX_QUOTE: usize = 400;

/// What went wrong with a server or a request to it, in a sentence.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    /// The server could not be started or reached, or the handshake failed.
    #[error("{0}")]
    Start(String),
    /// No answer in time.
    #[error("no answer to {what} within {secs:.0} s")]
    Timeout {
        /// The request.
        what: &'static str,
        /// The bound, in seconds.
        secs: f64,
    },
    /// The server went away.
    #[error("the server closed the connection{0}")]
    Closed(String),
    /// The server answered with a JSON-RPC error.
    #[error("the server refused {what}: {message}")]
    Refused {
        /// The request.
        what: &'static str,
        /// Its message, cleaned.
        message: String,
    },
    /// The server's answer does not follow the protocol.
    #[error("{0}")]
    Protocol(String),
    /// The user stopped the call.
    #[error("stopped by the user")]
    Stopped,
}

/// A tool as the server listed it, before the host cleans and names it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTool {
    /// The server's name for it (used in calls).
    pub name: String,
    /// Its description (not yet cleaned).
    pub description: String,
    /// Its `inputSchema`, a JSON object.
    pub schema: Map<String, Value>,
}

/// A tool's answer, read leniently.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// `isError` was not set.
    pub ok: bool,
    /// The text parts joined, other parts as short placeholders.
    pub text: String,
    /// `structuredContent`, when it is an object.
    pub structured: Option<Map<String, Value>>,
}

/// The client side of the protocol: names gemma-chat, and reports a server's
/// `tools/list_changed` on a channel.
pub struct Handler {
    list_changed: UnboundedSender<()>,
}

impl Handler {
    /// A handler that sends `()` on `list_changed` for each `tools/list_changed`.
    pub fn new(list_changed: UnboundedSender<()>) -> Self {
        Handler { list_changed }
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("gemma-chat", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(());
    }
}

/// A live connection: the protocol's peer, the service running it, and for a stdio server the
/// child and its stderr.
pub struct Connection {
    /// The running client (dropping it closes the connection).
    pub service: RunningService<RoleClient, Handler>,
    /// The child process of a stdio server (killed on drop).
    pub child: Option<Child>,
    /// Its stderr so far.
    pub stderr: Option<Arc<Mutex<StderrTail>>>,
}

impl Connection {
    /// ` (stderr: …)` when a stdio server wrote to stderr, else nothing.
    pub fn stderr_note(&self) -> String {
        self.stderr.as_deref().map(stderr_note).unwrap_or_default()
    }
}

/// How to reach a server, with its environment and headers already resolved.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A child process: program, arguments, its whole environment.
    Stdio(String, Vec<String>, BTreeMap<String, String>),
    /// A streamable-HTTP endpoint and its headers.
    Http(String, HashMap<HeaderName, HeaderValue>),
}

/// Resolves `config` against the environment `env` (`${VAR}` in `env` values and headers,
/// `headers_env`): the error names what is missing.
pub fn plan(config: &ServerConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Plan, McpError> {
    match (&config.command, &config.url) {
        (Some(program), None) => {
            let child_env =
                stdio::child_env(config, env).map_err(|e| McpError::Start(e.to_string()))?;
            Ok(Plan::Stdio(program.clone(), config.args.clone(), child_env))
        }
        (None, Some(url)) => Ok(Plan::Http(url.clone(), streamable::headers(config, env)?)),
        _ => Err(McpError::Start("give either `command` or `url`".to_owned())),
    }
}

/// Starts or reaches the server of `plan` and runs the handshake within `timeout`.
pub async fn open(plan: Plan, handler: Handler, timeout: Duration) -> Result<Connection, McpError> {
    match plan {
        Plan::Stdio(program, args, env) => {
            let spawned = stdio::spawn(&program, &args, &env).map_err(|e| {
                McpError::Start(format!(
                    "cannot start `{}`: {e}",
                    clean::message(&program, 200)
                ))
            })?;
            connect_stdio(spawned, handler, timeout).await
        }
        Plan::Http(url, headers) => streamable::connect(&url, headers, handler, timeout).await,
    }
}

/// Runs the handshake with a started stdio server within `timeout`.
pub async fn connect_stdio(
    spawned: Spawned,
    handler: Handler,
    timeout: Duration,
) -> Result<Connection, McpError> {
    let Spawned {
        mut child,
        stdout,
        stdin,
        stderr,
    } = spawned;
    let stdout = guard::Guarded::new(stdout, Arc::clone(&stderr));
    let transport = AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE);
    match tokio::time::timeout(timeout, handler.serve(transport)).await {
        Ok(Ok(service)) => Ok(Connection {
            service,
            child: Some(child),
            stderr: Some(stderr),
        }),
        Ok(Err(e)) => {
            // Give a dying child a moment, so its exit status and last words are known.
            let status = tokio::time::timeout(Duration::from_millis(500), child.wait()).await;
            let exit = match status {
                Ok(Ok(status)) => format!(", {status}"),
                _ => String::new(),
            };
            let why = clean::message(&e.to_string(), MAX_QUOTE);
            Err(McpError::Start(format!(
                "the handshake failed ({why}){exit}{}",
                stderr_note(&stderr)
            )))
        }
        Err(_) => Err(McpError::Start(format!(
            "no answer to initialize within {:.0} s{}",
            timeout.as_secs_f64(),
            stderr_note(&stderr)
        ))),
    }
}

/// Sends `method` with `params` and waits for its result, at most `timeout`, or until `stop`
/// resolves (then the server is told the request is cancelled).
async fn request(
    peer: &Peer<RoleClient>,
    what: &'static str,
    method: &str,
    params: Option<Value>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> Result<Value, McpError> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, params));
    let options = PeerRequestOptions::with_timeout(timeout);
    let handle = peer
        .send_request_with_option(request, options)
        .await
        .map_err(|e| failure(what, e))?;
    let id: RequestId = handle.id.clone();
    tokio::select! {
        answer = handle.await_response() => {
            let result = answer.map_err(|e| failure(what, e))?;
            serde_json::to_value(result)
                .map_err(|e| McpError::Protocol(format!("the answer to {what} is not JSON: {e}")))
        }
        () = stop => {
            let reason = Some("stopped by the user".to_owned());
            let _ = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await;
            Err(McpError::Stopped)
        }
    }
}

/// A failed request in a sentence.
fn failure(what: &'static str, error: ServiceError) -> McpError {
    match error {
        ServiceError::Timeout { timeout } => McpError::Timeout {
            what,
            secs: timeout.as_secs_f64(),
        },
        ServiceError::TransportClosed => McpError::Closed(String::new()),
        ServiceError::McpError(data) => McpError::Refused {
            what,
            message: clean::message(&data.message, MAX_QUOTE),
        },
        ServiceError::Cancelled { .. } => McpError::Stopped,
        other => McpError::Protocol(format!(
            "{what} failed: {}",
            clean::message(&other.to_string(), MAX_QUOTE)
        )),
    }
}

/// Every tool of the server, page by page, each page within `timeout`; at most [`MAX_TOOLS`]
/// tools and [`MAX_PAGES`] pages. A tool without a name, or whose `inputSchema` is not an
/// object, fails the whole list: the server is broken and is not used.
pub async fn list_tools(
    peer: &Peer<RoleClient>,
    timeout: Duration,
) -> Result<Vec<RawTool>, McpError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.take().map(|c| json!({ "cursor": c }));
        let page = request(peer, "tools/list", "tools/list", params, timeout, never()).await?;
        let items = page.get("tools").and_then(Value::as_array).ok_or_else(|| {
            McpError::Protocol("tools/list answered without a `tools` list".into())
        })?;
        for item in items {
            if tools.len() == MAX_TOOLS {
                return Err(McpError::Protocol(format!(
                    "the server lists more than {MAX_TOOLS} tools"
                )));
            }
            tools.push(read_tool(item)?);
        }
        match page.get("nextCursor") {
            Some(Value::String(next)) if !next.is_empty() => cursor = Some(next.clone()),
            _ => return Ok(tools),
        }
    }
    Err(McpError::Protocol(format!(
        "the tool list runs past {MAX_PAGES} pages"
    )))
}

/// A future that never resolves (a request nobody stops).
async fn never() {
    std::future::pending::<()>().await;
}

/// One entry of `tools/list`.
fn read_tool(item: &Value) -> Result<RawTool, McpError> {
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.trim().is_empty());
    let Some(name) = name else {
        return Err(McpError::Protocol(
            "tools/list holds a tool without a name".into(),
        ));
    };
    let shown = clean::message(name, 80);
    let schema = match item.get("inputSchema") {
        Some(Value::Object(schema)) => schema.clone(),
        Some(other) => {
            return Err(McpError::Protocol(format!(
                "tool `{shown}`: its inputSchema is {}, not a JSON object",
                kind(other)
            )));
        }
        None => {
            return Err(McpError::Protocol(format!(
                "tool `{shown}` has no inputSchema"
            )));
        }
    };
    let description = item
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(RawTool {
        name: name.to_owned(),
        description: description.to_owned(),
        schema,
    })
}

/// What kind of JSON value `v` is, for a message.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Calls `tool` with `arguments`, at most `timeout`, or until `stop` resolves.
pub async fn call_tool(
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: Map<String, Value>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> Result<ToolAnswer, McpError> {
    let params = json!({ "name": tool, "arguments": arguments });
    let answer = request(
        peer,
        "the tool call",
        "tools/call",
        Some(params),
        timeout,
        stop,
    )
    .await?;
    read_answer(&answer)
}
