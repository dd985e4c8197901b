//! The calls of a paused turn ([`ToolRun`]), for both engines: each read ([`Attempt`]),
//! approved (or asked about), run on the host and waited for, stopped on Esc. Then, for the
//! local engine, their responses as the ids the model reads next, written as the chat template
//! writes `<|tool_response>response:NAME{…}<tool_response|>` blocks, with a tool's text never
//! able to become a control token; for the remote engine, as the text of `tool` messages.

use std::collections::BTreeSet;

use gemma_model::tokenizer::Tokenizer;
use gemma_tools::host::{CallResult, PendingCall, ToolHost, ToolSpec, clean};
use gemma_tools::syntax::{self, ToolResponse};
use serde_json::{Map, Value};

use super::super::protocol::{CallMade, Event, TabId, ToolCall, ToolDecision, ToolOutcome};
use super::{EngineTools, TabTools};

/// Where one call stands.
enum State {
    /// Waiting for the user.
    Asking,
    /// On the host.
    Running(PendingCall),
    /// Over: what the model gets, and the outcome told to the front end.
    Done(ToolResponse, ToolOutcome),
}

struct Call {
    call: ToolCall,
    args: Map<String, Value>,
    state: State,
}

/// A call as read, before it runs: the tool it names, and its arguments or why they could not
/// be read (said to the model as the call's error).
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The tool's name (`?` when the call names none).
    pub name: String,
    /// The arguments, or what is wrong with the call.
    pub arguments: Result<Map<String, Value>, String>,
    /// The arguments as they came (the whole call's text where it could not be read), cut to
    /// [`RAW_SHOWN`] bytes: what a call that fails is shown with.
    pub raw: String,
    /// The call as the model wrote it in its own syntax (see [`ToolCall::written`]); empty for
    /// a server's JSON calls.
    pub written: String,
}

impl Attempt {
    /// The call in `ids` (between `<|tool_call>` and `<tool_call|>`), read from the model's
    /// syntax.
    pub fn read(tok: &Tokenizer, ids: &[u32]) -> Self {
        let text = tok.decode(ids, false).unwrap_or_default();
        let (name, arguments) = match syntax::parse_call(&text) {
            Ok(p) => (p.name, Ok(p.arguments)),
            Err(e) => ("?".into(), Err(format!("the call could not be read: {e}"))),
        };
        Attempt {
            name,
            arguments,
            raw: raw_shown(&text),
            written: text,
        }
    }
}

/// Where a hand-over's calls fall: the tab, the bytes of the answer's text before them, and the
/// hand-over's number in the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandOver {
    /// The tab whose turn made the calls.
    pub tab: TabId,
    /// See [`ToolCall::at`].
    pub at: usize,
    /// See [`ToolCall::handover`].
    pub number: usize,
}

/// Bytes of a failed call's arguments kept to show it.
pub const RAW_SHOWN: usize = 4096;

/// `text` cut to [`RAW_SHOWN`] bytes on a character boundary, `…` where it was cut.
pub fn raw_shown(text: &str) -> String {
    if text.len() <= RAW_SHOWN {
        return text.to_string();
    }
    let mut end = RAW_SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Whether a call of `tool` runs without asking: the server's `auto_approve`, "always" this
/// run, or "for this tab".
pub fn approved(always: &BTreeSet<String>, tab: &TabTools, tool: &ToolSpec) -> bool {
    tool.auto_approve || always.contains(&tool.name) || tab.approved.contains(&tool.name)
}

/// The calls of one hand-over.
pub struct ToolRun {
    calls: Vec<Call>,
}

impl std::fmt::Debug for ToolRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRun")
            .field("calls", &self.calls.len())
            .finish()
    }
}

/// A call over: `response` is what the model reads; the outcome says it, with `text`.
fn done(call: &ToolCall, response: ToolResponse, ok: bool, text: &str, run: (usize, f64)) -> State {
    let structured = match &response {
        ToolResponse::Object(m) => Some(Value::Object(m.clone()).to_string()),
        ToolResponse::Text(_) => None,
    };
    let outcome = ToolOutcome {
        id: call.id,
        name: call.name.clone(),
        ok,
        text: text.to_string(),
        structured,
        bytes: run.0,
        seconds: run.1,
    };
    State::Done(response, outcome)
}

/// `call` started on `host` (without one, it fails: nothing could run it).
fn run_on(host: Option<&ToolHost>, call: &ToolCall, args: Map<String, Value>) -> State {
    match host {
        Some(h) => State::Running(h.call(&call.name, args)),
        None => failure(call, "no tool host runs this tool"),
    }
}

/// A failure the model reads as the tool's response.
fn failure(call: &ToolCall, text: &str) -> State {
    let mut m = Map::new();
    m.insert("error".into(), Value::String(text.to_string()));
    done(
        call,
        ToolResponse::Object(m),
        false,
        text,
        (text.len(), 0.0),
    )
}

impl ToolRun {
    /// Reads the batch's calls (each the ids between `<|tool_call>` and `<tool_call|>`), asks
    /// about or starts each, and returns the events that say so.
    pub fn start(
        tools: &EngineTools,
        tab_tools: &mut TabTools,
        declared: &[ToolSpec],
        tok: &Tokenizer,
        batch: Vec<Vec<u32>>,
        place: HandOver,
    ) -> (Self, Vec<Event>) {
        let attempts = batch
            .into_iter()
            .map(|ids| Attempt::read(tok, &ids))
            .collect();
        let (host, always) = (tools.host.as_deref(), &tools.always);
        Self::begin(host, always, tab_tools, declared, attempts, place)
    }

    /// The calls `attempts` (read by either engine): each that reads and names a declared tool
    /// is asked about or started on `host` (`always`: tools approved everywhere), the others
    /// end at once with an error the model reads; the events that say so.
    pub fn begin(
        host: Option<&ToolHost>,
        always: &BTreeSet<String>,
        tab_tools: &mut TabTools,
        declared: &[ToolSpec],
        attempts: Vec<Attempt>,
        place: HandOver,
    ) -> (Self, Vec<Event>) {
        let tab = place.tab;
        let mut calls = Vec::new();
        let mut events = Vec::new();
        for Attempt {
            name,
            arguments,
            raw,
            written,
        } in attempts
        {
            tab_tools.last_call += 1;
            let spec = declared.iter().find(|t| t.name == name);
            let args = arguments.clone().unwrap_or_default();
            let call = ToolCall {
                id: tab_tools.last_call,
                name: name.clone(),
                server: spec.map_or_else(String::new, |s| s.server.clone()),
                // A call that fails is shown with what it sent, not an empty object.
                arguments: match &arguments {
                    Ok(_) => Value::Object(args.clone()).to_string(),
                    Err(_) => raw,
                },
                written,
                at: place.at,
                handover: place.number,
            };
            let approval = spec.is_some_and(|s| !approved(always, tab_tools, s));
            let state = match (arguments, spec) {
                (Err(e), _) => failure(&call, &e),
                (Ok(_), None) => failure(&call, &format!("there is no tool named {name}")),
                (Ok(_), Some(_)) if approval => State::Asking,
                (Ok(_), Some(_)) => run_on(host, &call, args.clone()),
            };
            events.push(Event::ToolCall {
                tab,
                call: call.clone(),
                approval: matches!(state, State::Asking),
            });
            if let State::Done(_, o) = &state {
                events.push(Event::ToolResult {
                    tab,
                    outcome: o.clone(),
                });
            }
            calls.push(Call { call, args, state });
        }
        (Self { calls }, events)
    }

    /// The user's decision on call `id`: run it, or deny it with a note. False when no call
    /// of this run waits for it.
    pub fn decide(
        &mut self,
        tools: &mut EngineTools,
        tab_tools: &mut TabTools,
        id: u64,
        decision: ToolDecision,
        tab: TabId,
    ) -> (bool, Vec<Event>) {
        let host = tools.host.as_deref();
        self.decide_on(host, &mut tools.always, tab_tools, id, decision, tab)
    }

    /// [`ToolRun::decide`] for any engine: runs on `host`, "always" joins `always`.
    pub fn decide_on(
        &mut self,
        host: Option<&ToolHost>,
        always: &mut BTreeSet<String>,
        tab_tools: &mut TabTools,
        id: u64,
        decision: ToolDecision,
        tab: TabId,
    ) -> (bool, Vec<Event>) {
        let Some(c) = self
            .calls
            .iter_mut()
            .find(|c| c.call.id == id && matches!(c.state, State::Asking))
        else {
            return (false, Vec::new());
        };
        let name = c.call.name.clone();
        c.state = match decision {
            ToolDecision::Deny { note } => {
                let text = match note.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
                    Some(n) => format!("The user denied this call and says: {n}"),
                    None => "The user denied this call.".to_string(),
                };
                failure(&c.call, &text)
            }
            d => {
                match d {
                    ToolDecision::Tab => {
                        tab_tools.approved.insert(name.clone());
                    }
                    ToolDecision::Always => {
                        always.insert(name.clone());
                    }
                    _ => {}
                }
                run_on(host, &c.call, c.args.clone())
            }
        };
        let events = match &c.state {
            State::Done(_, o) => vec![Event::ToolResult {
                tab,
                outcome: o.clone(),
            }],
            _ => Vec::new(),
        };
        (true, events)
    }

    /// Takes the results that came in; their events.
    pub fn poll(&mut self, tab: TabId) -> Vec<Event> {
        let mut events = Vec::new();
        for c in &mut self.calls {
            if let State::Running(p) = &mut c.state
                && let Some(r) = p.try_take()
            {
                let done = finished(&c.call, r);
                if let State::Done(_, o) = &done {
                    events.push(Event::ToolResult {
                        tab,
                        outcome: o.clone(),
                    });
                }
                c.state = done;
            }
        }
        events
    }

    /// Stops every call still asking or running (Esc): each gets a `stopped` response.
    pub fn stop(&mut self, tab: TabId) -> Vec<Event> {
        let mut events = Vec::new();
        for c in &mut self.calls {
            let stopped = match &mut c.state {
                State::Asking => true,
                State::Running(p) => {
                    p.cancel();
                    true
                }
                State::Done(..) => false,
            };
            if stopped {
                c.state = failure(&c.call, "The user stopped this call.");
                if let State::Done(_, o) = &c.state {
                    events.push(Event::ToolResult {
                        tab,
                        outcome: o.clone(),
                    });
                }
            }
        }
        events
    }

    /// The calls as the transcript keeps them, each with its response once it has one.
    pub fn made(&self) -> Vec<CallMade> {
        self.calls
            .iter()
            .map(|c| match &c.state {
                State::Done(_, o) => CallMade::new(&c.call, Some(o)),
                _ => CallMade::new(&c.call, None),
            })
            .collect()
    }

    /// How many calls the hand-over made.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// Whether every call is over.
    pub fn done(&self) -> bool {
        self.calls
            .iter()
            .all(|c| matches!(c.state, State::Done(..)))
    }

    /// Whether a call waits for the user.
    pub fn asking(&self) -> bool {
        self.calls.iter().any(|c| matches!(c.state, State::Asking))
    }

    /// Each call's response as a `tool` message's text, in order (`None`: not over): text as
    /// it is, an object (an error too) as JSON, cut to `max` bytes with a note.
    pub fn response_texts(&self, max: usize) -> Vec<Option<String>> {
        self.calls
            .iter()
            .map(|c| match &c.state {
                State::Done(ToolResponse::Text(t), _) => Some(clean::cut(t, max)),
                State::Done(ToolResponse::Object(m), _) => {
                    Some(clean::cut(&Value::Object(m.clone()).to_string(), max))
                }
                _ => None,
            })
            .collect()
    }

    /// The responses as ids, in the calls' order, within `room` tokens (see
    /// [`super::ToolText::responses`]).
    pub fn response_ids(&self, tools: &EngineTools, tok: &Tokenizer, room: usize) -> Vec<u32> {
        let responses: Vec<(&str, Option<&ToolResponse>)> = self
            .calls
            .iter()
            .map(|c| match &c.state {
                State::Done(r, _) => (c.call.name.as_str(), Some(r)),
                _ => (c.call.name.as_str(), None),
            })
            .collect();
        tools.text.responses(tok, &responses, room)
    }
}

/// The calls of the hand-over that ends `answer`: the ids between each `<|tool_call>` and its
/// `<tool_call|>` after the last tool response.
pub fn calls_in(answer: &[u32], ids: super::ToolIds) -> Vec<Vec<u32>> {
    let from = answer
        .iter()
        .rposition(|&i| i == ids.response_end)
        .map_or(0, |p| p + 1);
    let mut calls = Vec::new();
    let mut open: Option<Vec<u32>> = None;
    for &id in &answer[from..] {
        if id == ids.call {
            open = Some(Vec::new());
        } else if id == ids.call_end {
            calls.extend(open.take());
        } else if let Some(c) = open.as_mut() {
            c.push(id);
        }
    }
    calls
}

/// A host result as the call's end.
fn finished(call: &ToolCall, r: CallResult) -> State {
    let response = match (r.ok, r.structured) {
        (true, Some(obj)) => ToolResponse::Object(obj),
        (true, None) => ToolResponse::Text(r.text.clone()),
        (false, _) => {
            let mut m = Map::new();
            m.insert("error".into(), Value::String(r.text.clone()));
            ToolResponse::Object(m)
        }
    };
    done(call, response, r.ok, &r.text, (r.bytes, r.seconds))
}
