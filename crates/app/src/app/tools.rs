//! Tool calls as the UI keeps them: each call the model made, on the answer that made it
//! ([`ToolRun`], saved with the chat), and the engine's catalogue of servers and tools
//! ([`Catalogue`]). Text from a model or a server is kept as it came; it is cleaned where it is
//! shown.

pub use crate::chats::fmt::human_bytes;
use gemma_protocol::{ServerInfo, ToolCall, ToolInfo, ToolOutcome};

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Waiting for the user's approval.
    Waiting,
    /// Approved (or needing none) and running.
    Running,
    /// The tool answered.
    Done,
    /// The tool failed, timed out or its server was lost.
    Failed,
    /// The user denied it.
    Denied,
    /// The turn ended (stopped, failed) before the call did.
    Stopped,
}

impl RunState {
    /// The name a chat file holds.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Waiting => "waiting",
            RunState::Running => "running",
            RunState::Done => "ok",
            RunState::Failed => "failed",
            RunState::Denied => "denied",
            RunState::Stopped => "stopped",
        }
    }

    /// The state a chat file names (a call saved unfinished was stopped by the save).
    pub fn parse(s: &str) -> Self {
        match s {
            "ok" => RunState::Done,
            "failed" => RunState::Failed,
            "denied" => RunState::Denied,
            _ => RunState::Stopped,
        }
    }

    /// Whether the call has not ended yet.
    pub fn open(self) -> bool {
        matches!(self, RunState::Waiting | RunState::Running)
    }
}

/// One call the model made in an answer, and what came of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRun {
    /// The call's id in its tab.
    pub id: u64,
    /// The tool.
    pub name: String,
    /// Its server (`builtin` for a built-in).
    pub server: String,
    /// The arguments, JSON text as the engine gave them.
    pub arguments: String,
    /// Where it stands.
    pub state: RunState,
    /// What the model was given as the tool's response (a denial's note too).
    pub result: String,
    /// Bytes the tool returned, before any cut.
    pub bytes: usize,
    /// Seconds it ran.
    pub seconds: f64,
    /// The call as the model wrote it, and where (see [`ToolCall::written`]).
    pub written: String,
    /// See [`ToolCall::at`].
    pub at: usize,
    /// See [`ToolCall::handover`].
    pub handover: usize,
    /// See [`ToolOutcome::structured`].
    pub structured: Option<String>,
}

impl ToolRun {
    /// A call just made; `approval`: it waits for the user.
    pub fn new(call: &ToolCall, approval: bool) -> Self {
        Self {
            id: call.id,
            name: call.name.clone(),
            server: call.server.clone(),
            arguments: call.arguments.clone(),
            state: if approval {
                RunState::Waiting
            } else {
                RunState::Running
            },
            result: String::new(),
            bytes: 0,
            seconds: 0.0,
            written: call.written.clone(),
            at: call.at,
            handover: call.handover,
            structured: None,
        }
    }

    /// The call as a rebuilt conversation writes it again, with the response the model read:
    /// none while it runs, nor for a call the turn ended before (`Stopped`: no outcome came, the
    /// model read nothing).
    pub fn made(&self) -> gemma_protocol::CallMade {
        let answered = matches!(
            self.state,
            RunState::Done | RunState::Failed | RunState::Denied
        );
        gemma_protocol::CallMade {
            name: self.name.clone(),
            arguments: self.arguments.clone(),
            written: self.written.clone(),
            at: self.at,
            handover: self.handover,
            response: answered.then(|| gemma_protocol::CallResponse {
                text: self.result.clone(),
                structured: self.structured.clone(),
            }),
        }
    }

    /// The call ended with `o` (a call the user denied stays denied).
    pub fn finish(&mut self, o: &ToolOutcome) {
        self.state = match (o.ok, self.state) {
            (true, _) => RunState::Done,
            (false, RunState::Denied) => RunState::Denied,
            (false, _) => RunState::Failed,
        };
        self.result = o.text.clone();
        self.structured = o.structured.clone();
        self.bytes = o.bytes;
        self.seconds = o.seconds;
    }

    /// What follows the arrow on its line: the result's size, or what became of the call.
    pub fn outcome(&self) -> String {
        match self.state {
            RunState::Waiting => "waiting for approval".into(),
            RunState::Running => "running…".into(),
            RunState::Done => human_bytes(self.bytes),
            RunState::Failed => {
                let why = gemma_protocol::text::short(self.result.trim(), 60);
                if why.is_empty() {
                    "failed".into()
                } else {
                    format!("failed: {why}")
                }
            }
            RunState::Denied => "denied".into(),
            RunState::Stopped => "stopped".into(),
        }
    }

    /// The text search looks through: the tool's name, its arguments and its result.
    pub fn searchable(&self) -> [&str; 3] {
        [&self.name, &self.arguments, &self.result]
    }
}

/// Arguments' JSON text pretty-printed (as it came when it is not JSON), cleaned for a terminal.
pub fn pretty_arguments(text: &str) -> String {
    let pretty = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string());
    gemma_protocol::text::printable(&pretty).into_owned()
}

/// `text`'s lines cut into rows of at most `width` columns (wide characters kept whole).
pub fn hard_wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(2);
    let mut rows = Vec::new();
    for line in text.split('\n') {
        let mut row = String::new();
        let mut w = 0;
        for c in line.chars() {
            let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if w + cw > width {
                rows.push(std::mem::take(&mut row));
                w = 0;
            }
            row.push(c);
            w += cw;
        }
        rows.push(row);
    }
    rows
}

/// The engine's tools as it last told them ([`gemma_protocol::Event::Tools`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Catalogue {
    /// The servers (and `builtin`), each with its error if it offers nothing.
    pub servers: Vec<ServerInfo>,
    /// Their tools.
    pub tools: Vec<ToolInfo>,
}

impl Catalogue {
    /// Whether `name` is a server or a `server.tool` the catalogue holds.
    pub fn knows(&self, name: &str) -> bool {
        self.servers.iter().any(|s| s.name == name)
            || self
                .tools
                .iter()
                .any(|t| name == format!("{}.{}", t.server, t.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> ToolCall {
        ToolCall {
            id: 3,
            name: "read_file".into(),
            server: "files".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
            ..Default::default()
        }
    }

    fn outcome(ok: bool, text: &str, bytes: usize) -> ToolOutcome {
        ToolOutcome {
            id: 3,
            name: "read_file".into(),
            ok,
            text: text.into(),
            bytes,
            seconds: 0.2,
            ..Default::default()
        }
    }

    #[test]
    fn a_run_says_what_came_of_it() {
        let mut r = ToolRun::new(&call(), true);
        assert_eq!(r.outcome(), "waiting for approval");
        r.finish(&outcome(true, "hello", 1234));
        assert_eq!((r.state, r.outcome()), (RunState::Done, "1.2 kB".into()));
        let mut r = ToolRun::new(&call(), false);
        r.finish(&outcome(false, "timed out\nafter 30 s", 0));
        assert_eq!(r.outcome(), "failed: timed out after 30 s");
        let mut r = ToolRun::new(&call(), true);
        r.state = RunState::Denied;
        r.finish(&outcome(false, "the user denied it", 0));
        assert_eq!(r.outcome(), "denied");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(2_500_000), "2.5 MB");
    }

    #[test]
    fn arguments_are_pretty_and_clean() {
        assert_eq!(
            pretty_arguments(r#"{"path":"a\u202e.txt","n":1}"#),
            "{\n  \"path\": \"a.txt\",\n  \"n\": 1\n}"
        );
        assert_eq!(pretty_arguments("not \u{1b}[2Jjson"), "not [2Jjson");
        assert_eq!(hard_wrap("abcdef\n\nxy", 4), ["abcd", "ef", "", "xy"]);
        for s in ["waiting", "running", "ok", "failed", "denied", "stopped"] {
            let back = RunState::parse(s).as_str();
            assert!(back == s || !RunState::parse(s).open(), "{s}");
        }
    }

    #[test]
    fn a_call_gives_the_response_the_model_read_only_once_it_read_one() {
        let mut r = ToolRun::new(&call(), true);
        assert!(r.made().response.is_none(), "waiting");
        r.state = RunState::Stopped;
        assert!(r.made().response.is_none(), "the turn ended first");
        r.state = RunState::Denied;
        r.finish(&outcome(false, "The user denied this call.", 0));
        assert_eq!(r.state, RunState::Denied);
        let got = r.made().response.expect("read");
        assert_eq!(got.text, "The user denied this call.");
    }
}
