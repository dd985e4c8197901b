//! The tool host the engine holds: [`ToolHost::start`] gives the built-ins at once and starts
//! every enabled MCP server on one background thread ([`runtime`]) with a tokio runtime;
//! [`ToolHost::tools`] is what the model may call (built in [`state`]), [`ToolHost::call`] hands
//! a call to that thread and returns a [`PendingCall`] at once, which gives a [`CallResult`]:
//! text cut to the limit with a note, or a failure in a sentence. A server that crashes, hangs
//! or lies fails alone; the host goes on with the others and never panics on what they send.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use info::ServerInfo;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::builtin::Builtins;
use crate::config::{BUILTIN_SERVER, Limits, ToolsConfig};
use crate::mcp::ToolAnswer;

pub mod clean;
mod info;
mod runtime;
pub mod secrets;
pub mod state;

use secrets::Secrets;
pub use state::ToolSpec;
use state::{Server, Shared, Status};

/// The name of the tool thread.
pub const THREAD: &str = "gemma-tools";

/// A finished call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The tool did its work (not an MCP `isError`, not a failure of the call).
    pub ok: bool,
    /// The text parts joined, cut to `max_result_bytes` on a character boundary with a note
    /// `[cut: N of M bytes]`; for a failed call, what went wrong in a sentence.
    pub text: String,
    /// MCP `structuredContent`, when it is an object.
    pub structured: Option<Map<String, Value>>,
    /// Bytes of the text before the cut.
    pub bytes: usize,
    /// Seconds from the call to its result.
    pub seconds: f64,
}

impl CallResult {
    /// A failure: `why`, timed from `started`.
    pub fn failure(why: String, started: Instant) -> Self {
        let bytes = why.len();
        CallResult {
            ok: false,
            text: why,
            structured: None,
            bytes,
            seconds: secs(started),
        }
    }

    /// A tool's answer, its text cut to `max` bytes.
    fn answer(answer: ToolAnswer, max: usize, started: Instant) -> Self {
        CallResult {
            ok: answer.ok,
            bytes: answer.text.len(),
            text: clean::cut(&answer.text, max),
            structured: answer.structured,
            seconds: secs(started),
        }
    }
}

/// Seconds since `started`.
fn secs(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

/// A call on its way: poll it ([`PendingCall::try_take`]), wait for it ([`PendingCall::wait`]),
/// or stop it ([`PendingCall::cancel`]). Dropping it stops the call too.
pub struct PendingCall {
    result: Option<CallResult>,
    reply: Option<Receiver<CallResult>>,
    stop: Option<oneshot::Sender<()>>,
    started: Instant,
}

impl PendingCall {
    /// A call that is over before it started (no such tool, the host is gone).
    fn done(why: String, started: Instant) -> Self {
        PendingCall {
            result: Some(CallResult::failure(why, started)),
            reply: None,
            stop: None,
            started,
        }
    }

    /// The result, once it is there; `None` before, and after it was taken.
    pub fn try_take(&mut self) -> Option<CallResult> {
        if let Some(result) = self.result.take() {
            return Some(result);
        }
        let reply = self.reply.as_ref()?;
        let result = match reply.try_recv() {
            Ok(result) => result,
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => self.gone(),
        };
        self.reply = None;
        self.stop = None;
        Some(result)
    }

    /// Waits at most `timeout` for the result; past it, the call is stopped and fails.
    pub fn wait(mut self, timeout: Duration) -> CallResult {
        if let Some(result) = self.try_take() {
            return result;
        }
        let Some(reply) = self.reply.take() else {
            return self.gone();
        };
        match reply.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Disconnected) => self.gone(),
            Err(RecvTimeoutError::Timeout) => {
                self.stop_call();
                let why = format!("no result within {:.1} s", timeout.as_secs_f64());
                CallResult::failure(why, self.started)
            }
        }
    }

    /// Stops the call (Esc): its result becomes a `stopped by the user` failure, unless it had
    /// already come.
    pub fn cancel(&mut self) {
        if self.result.is_some() {
            return;
        }
        if let Some(reply) = self.reply.take()
            && let Ok(result) = reply.try_recv()
        {
            self.result = Some(result);
            return;
        }
        self.stop_call();
        self.result = Some(CallResult::failure(
            "stopped by the user".to_owned(),
            self.started,
        ));
    }

    /// Tells the tool thread to stop the call.
    fn stop_call(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// The failure when the tool thread went away without answering.
    fn gone(&self) -> CallResult {
        CallResult::failure(
            "the tool host stopped before the call finished".to_owned(),
            self.started,
        )
    }
}

/// The MCP servers and built-in tools of one gemma-chat process. `Send + Sync`; owns one
/// background thread.
pub struct ToolHost {
    shared: Arc<Shared>,
    limits: Limits,
    requests: Option<mpsc::UnboundedSender<runtime::Request>>,
    thread: Option<JoinHandle<()>>,
}

impl ToolHost {
    /// Returns at once: the built-ins are ready, the enabled servers start in the background.
    pub fn start(config: ToolsConfig) -> ToolHost {
        let builtins = Arc::new(Builtins::new(&config.builtin, config.limits.call_timeout));
        let mut servers = Vec::new();
        let builtin_tools = builtins.tools();
        if !builtin_tools.is_empty() || !builtins.problems().is_empty() {
            servers.push(new_server(
                BUILTIN_SERVER,
                "builtin",
                config.builtin.auto_approve.clone(),
            ));
        }
        let mut jobs = Vec::new();
        for (name, server) in &config.servers {
            let transport = if server.url.is_some() {
                "http"
            } else {
                "stdio"
            };
            let mut entry = new_server(name, transport, server.auto_approve.clone());
            match server.check(name) {
                Err(e) => entry.status = Status::Failed(e.to_string()),
                Ok(()) if !server.enabled => entry.status = Status::Disabled,
                Ok(()) => jobs.push((servers.len(), server.clone())),
            }
            servers.push(entry);
        }
        let secrets = Secrets::of(&config, &|name: &str| std::env::var(name).ok());
        let shared = Arc::new(Shared::new(servers, secrets));
        if !builtin_tools.is_empty() || !builtins.problems().is_empty() {
            shared.ready(0, None, builtin_tools);
            if !builtins.problems().is_empty() {
                shared.update(0, |s| s.skipped.extend(builtins.problems().iter().cloned()));
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let limits = config.limits.clone();
        let thread_shared = Arc::clone(&shared);
        let job_indices: Vec<usize> = jobs.iter().map(|(i, _)| *i).collect();
        let spawned = std::thread::Builder::new()
            .name(THREAD.to_owned())
            .spawn(move || runtime::run(thread_shared, builtins, jobs, config.limits, rx));
        let thread = match spawned {
            Ok(handle) => Some(handle),
            Err(e) => {
                for index in job_indices {
                    shared.fail(index, format!("the tool thread cannot start: {e}"));
                }
                None
            }
        };
        ToolHost {
            shared,
            limits,
            requests: Some(tx),
            thread,
        }
    }

    /// Blocks until every enabled server has started or failed, or `timeout` has passed.
    pub fn wait_started(&self, timeout: Duration) {
        self.shared.wait_started(timeout);
    }

    /// Every configured server (disabled ones too) and the built-ins, with their state.
    pub fn servers(&self) -> Vec<ServerInfo> {
        let state = self.shared.lock();
        state.servers.iter().map(info::server_info).collect()
    }

    /// The tools the model may call now.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.shared.lock().listing.tools.clone()
    }

    /// The bounds on calls.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Hands a call to the tool thread; never blocks. A tool that does not exist gives a
    /// failed result at once.
    pub fn call(&self, name: &str, arguments: Map<String, Value>) -> PendingCall {
        let started = Instant::now();
        let route = self.shared.lock().listing.routes.get(name).cloned();
        let Some((server, tool)) = route else {
            let why = format!("there is no tool named `{}`", clean::message(name, 80));
            return PendingCall::done(why, started);
        };
        let (reply_tx, reply) = std::sync::mpsc::channel();
        let (stop, stop_rx) = oneshot::channel();
        let request = runtime::Request {
            server,
            tool,
            arguments,
            reply: reply_tx,
            stop: stop_rx,
            started,
        };
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|tx| tx.send(request).is_ok());
        if !sent {
            return PendingCall::done("the tool host has stopped".to_owned(), started);
        }
        PendingCall {
            result: None,
            reply: Some(reply),
            stop: Some(stop),
            started,
        }
    }

    /// Sets what is called (on the tool thread) whenever [`ToolHost::servers`] or
    /// [`ToolHost::tools`] change: a server started, failed or changed its tools.
    pub fn set_changed(&self, notify: Box<dyn Fn() + Send + Sync>) {
        self.shared.set_changed(Arc::from(notify));
    }
}

impl Drop for ToolHost {
    /// Closes the request channel, which ends the tool thread: the runtime shuts down (at most
    /// two seconds) and every server's child process is killed.
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A server entry before it starts.
fn new_server(name: &str, transport: &'static str, auto_approve: Vec<String>) -> Server {
    Server {
        name: name.to_owned(),
        transport,
        status: Status::Starting,
        tools: Vec::new(),
        skipped: Vec::new(),
        auto_approve,
        peer: None,
        since: None,
    }
}
