//! What the host knows, shared between the caller's threads and the tool thread: each server's
//! state and tools ([`Server`]), and the tool list built from them ([`listing`]): names cleaned
//! and made unique (a clash gets `server_tool`), descriptions and schemas cleaned for the prompt,
//! each name routed to its server and the server's own name for the tool. Every change rebuilds
//! the list, wakes [`Shared::wait_started`] and calls the caller's `changed` hook.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::{Peer, RoleClient};
use serde_json::Value;

use crate::host::clean;
use crate::host::secrets::Secrets;
use crate::mcp::RawTool;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name in the prompt and in calls: `[A-Za-z0-9_-]`, unique among the host's tools.
    pub name: String,
    /// The server it belongs to (`builtin` for the built-ins).
    pub server: String,
    /// What it does, cleaned of control characters and special-token look-alikes.
    pub description: String,
    /// Its parameters, a JSON schema object (strings cleaned like the description).
    pub parameters: Value,
    /// It runs without asking (`auto_approve` names it).
    pub auto_approve: bool,
}

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Turned off in the config.
    Disabled,
    /// Being started.
    Starting,
    /// Connected, its tools listed.
    Ready,
    /// It failed (to start, or later); why, in a sentence.
    Failed(String),
}

/// One server as the host keeps it.
pub struct Server {
    /// Its name in the config.
    pub name: String,
    /// `stdio`, `http` or `builtin`.
    pub transport: &'static str,
    /// Where it is.
    pub status: Status,
    /// Its tools (schemas already cleaned), while ready.
    pub tools: Vec<RawTool>,
    /// Tools it lists that are not offered, each with why.
    pub skipped: Vec<String>,
    /// Tools (by the server's names) that run without asking.
    pub auto_approve: Vec<String>,
    /// The protocol's peer, while ready (none for the built-ins).
    pub peer: Option<Peer<RoleClient>>,
    /// When it became ready.
    pub since: Option<Instant>,
}

/// The tools of every ready server, and where each name goes.
#[derive(Default)]
pub struct Listing {
    /// The tools, in server order.
    pub tools: Vec<ToolSpec>,
    /// Tool name → (server index, the server's name for the tool).
    pub routes: HashMap<String, (usize, String)>,
}

/// The servers and their listing.
pub struct State {
    /// Every configured server (disabled ones included), the built-ins first.
    pub servers: Vec<Server>,
    /// Built from `servers` after every change.
    pub listing: Listing,
}

/// The callback a caller gives to hear about changes.
pub type Notify = Arc<dyn Fn() + Send + Sync>;

/// [`State`] behind a lock, with a condition for "no server is starting" and the hook.
pub struct Shared {
    state: Mutex<State>,
    settled: Condvar,
    changed: Mutex<Option<Notify>>,
    /// What the servers were handed and must not get back out of the host.
    pub secrets: Secrets,
}

impl Shared {
    /// Shares `servers`, whose texts are cleaned of `secrets`.
    pub fn new(servers: Vec<Server>, secrets: Secrets) -> Self {
        let listing = listing(&servers);
        Shared {
            state: Mutex::new(State { servers, listing }),
            settled: Condvar::new(),
            changed: Mutex::new(None),
            secrets,
        }
    }

    /// The state, locked (a poisoned lock is taken over: the state is always whole).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the hook called after each change.
    pub fn set_changed(&self, notify: Notify) {
        *self
            .changed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(notify);
    }

    /// Changes server `index` with `change`, then rebuilds the listing, wakes waiters and calls
    /// the hook (outside the lock).
    pub fn update(&self, index: usize, change: impl FnOnce(&mut Server)) {
        {
            let mut state = self.lock();
            let Some(server) = state.servers.get_mut(index) else {
                return;
            };
            change(server);
            state.listing = listing(&state.servers);
        }
        self.settled.notify_all();
        let hook = self
            .changed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Server `index` failed: why, in a sentence; its tools are gone.
    pub fn fail(&self, index: usize, why: String) {
        let why = self.secrets.redact(&why);
        self.update(index, |s| {
            s.status = Status::Failed(why);
            s.tools.clear();
            s.peer = None;
            s.since = None;
        });
    }

    /// Server `index` is ready with `tools` (raw from the server, cleaned here).
    pub fn ready(&self, index: usize, peer: Option<Peer<RoleClient>>, mut tools: Vec<RawTool>) {
        for t in &mut tools {
            t.description = self.secrets.redact(&t.description);
            let mut schema = Value::Object(std::mem::take(&mut t.schema));
            self.secrets.redact_json(&mut schema);
            if let Value::Object(m) = schema {
                t.schema = m;
            }
        }
        let (tools, skipped) = clean_tools(tools);
        self.update(index, |s| {
            s.status = Status::Ready;
            s.tools = tools;
            s.skipped = skipped;
            s.peer = peer;
            s.since.get_or_insert_with(Instant::now);
        });
    }

    /// Blocks until no server is starting, or `timeout` has passed.
    pub fn wait_started(&self, timeout: Duration) {
        let guard = self.lock();
        let starting = |s: &mut State| s.servers.iter().any(|s| s.status == Status::Starting);
        let _ = self.settled.wait_timeout_while(guard, timeout, starting);
    }
}

/// `tools` with their schemas cleaned; those refused, each named with why.
fn clean_tools(tools: Vec<RawTool>) -> (Vec<RawTool>, Vec<String>) {
    let mut kept = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    for tool in tools {
        let shown = clean::message(&tool.name, 80);
        if !seen.insert(tool.name.clone()) {
            skipped.push(format!("`{shown}`: listed twice"));
            continue;
        }
        match clean::schema(&tool.schema) {
            Ok(schema) => kept.push(RawTool { schema, ..tool }),
            Err(why) => skipped.push(format!("`{shown}`: {why}")),
        }
    }
    (kept, skipped)
}

/// The tool list of the ready servers, in order: a name already taken becomes
/// `server_tool`, and `_2`, `_3`, … follow if that is taken too.
pub fn listing(servers: &[Server]) -> Listing {
    let mut out = Listing::default();
    for (index, server) in servers.iter().enumerate() {
        if server.status != Status::Ready {
            continue;
        }
        for tool in &server.tools {
            let mut name = clean::tool_name(&tool.name);
            if out.routes.contains_key(&name) {
                name = clean::tool_name(&format!("{}_{}", server.name, tool.name));
            }
            let base = name.clone();
            let mut n = 2;
            while out.routes.contains_key(&name) {
                name = format!(
                    "{}_{n}",
                    &base[..clean::floor_char_boundary(&base, clean::MAX_NAME - 4)]
                );
                n += 1;
            }
            let auto_approve = server
                .auto_approve
                .iter()
                .any(|a| *a == tool.name || *a == name);
            out.routes.insert(name.clone(), (index, tool.name.clone()));
            out.tools.push(ToolSpec {
                name,
                server: server.name.clone(),
                description: clean::prompt_text(&tool.description, clean::MAX_DESCRIPTION),
                parameters: Value::Object(tool.schema.clone()),
                auto_approve,
            });
        }
    }
    out
}
