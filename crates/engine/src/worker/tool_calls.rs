//! The engine thread's side of tool calls: what a tab declares and how its turn is guided, the
//! hand-over (each call asked about or run on the host, its result told to the UI), the user's
//! decisions, a stop while tools run, and the responses fed back into the same model turn.

use std::sync::Arc;

use super::Worker;
use crate::error::{Error, Result};
use crate::job::JobTools;
use crate::protocol::{CallMade, ToolCall};
use crate::protocol::{Event, TabId, ToolChoice, ToolDecision};
use crate::tools::guide::{CallGuide, RESERVE};
use crate::tools::run::{Attempt, HandOver, ToolRun, calls_in};
use crate::tools::{CLIENT, EngineTools, TabTools, client_specs, declarations};
use crate::turn::Turn;
use gemma_tools::host::ToolSpec;

use crate::tools::text::ANSWER_ROOM;
impl Worker<'_> {
    /// The tools `tab` declares now (none without tools, or with them off): the front end's own
    /// when it declares any, else the host's; each one whose arguments' grammar compiles. A
    /// tool that cannot be declared is told once per turn.
    pub(super) fn declared(&mut self, tab: TabId) -> Vec<ToolSpec> {
        let (ok, refused) = self.declarable(tab);
        if !refused.is_empty() {
            self.emit(Event::Notice {
                tab,
                text: format!(
                    "not declared to the model, their arguments' schema cannot be followed: {}",
                    refused.join("; ")
                ),
            });
        }
        ok
    }

    /// [`Self::declared`], untold: the tools, and those that cannot be declared with why.
    pub(super) fn declarable(&mut self, tab: TabId) -> (Vec<ToolSpec>, Vec<String>) {
        let Some(tools) = self.tools.as_ref() else {
            return (Vec::new(), Vec::new());
        };
        let t = self.tabs.get_or_insert(tab, &self.lm.model, self.context);
        let (specs, mut refused) = match t.settings.client_tools.is_empty() {
            true => (tools.declared(&t.settings.tools), Vec::new()),
            false => client_specs(&t.settings.client_tools),
        };
        let mut ok = Vec::new();
        for spec in specs {
            match EngineTools::grammar(std::slice::from_ref(&spec)) {
                Ok(_) => ok.push(spec),
                Err(e) => refused.push(format!("{} ({e})", spec.name)),
            }
        }
        (ok, refused)
    }

    /// The declarations of `declared` for the chat template (`None`: no tools).
    pub(super) fn declarations(declared: &[ToolSpec]) -> Option<serde_json::Value> {
        (!declared.is_empty()).then(|| declarations(declared))
    }

    /// `turn` guided for `declared`, and the job's tools (`None` without tools); `no_calls`:
    /// the tools stay declared (the header is the conversation's) but none may be called.
    pub(super) fn guided(
        &self,
        tab: TabId,
        turn: Turn,
        declared: Vec<ToolSpec>,
        no_calls: bool,
    ) -> Result<(Turn, Option<JobTools>)> {
        let Some(tools) = self.tools.as_ref().filter(|_| !declared.is_empty()) else {
            return Ok((turn, None));
        };
        let Some(t) = self.tabs.get(tab) else {
            return Ok((turn, None));
        };
        let grammar = EngineTools::grammar(&declared).map_err(Error::Invalid)?;
        let choice = match no_calls {
            true => ToolChoice::None,
            false => t.settings.tool_choice,
        };
        // The guide forces a call at the turn's first token only where one fits: said, not
        // silently dropped.
        let room = t.context.saturating_sub(turn.prompt().len());
        if choice == ToolChoice::Required && !CallGuide::room_for_a_call(room) {
            self.emit(Event::Notice {
                tab,
                text: format!(
                    "tool choice `required` not followed this turn: {room} tokens are left in the \
                     context and a call needs more than {} (its response and the answer after \
                     it); the model answers in text. /compact or a longer context makes room",
                    2 * RESERVE
                ),
            });
        }
        let guide = CallGuide::new(
            Arc::new(grammar),
            tools.vocab.clone(),
            tools.text.ids,
            choice,
            tools.limits().max_calls,
            tools.limits().max_call_tokens,
        );
        let job = JobTools {
            client: declared.iter().any(|d| d.server == CLIENT),
            declared,
            ..JobTools::default()
        };
        Ok((turn.with_guide(Box::new(guide)), Some(job)))
    }

    /// One step of a turn that handed over to its tools: the calls start (asked about or run),
    /// results are taken as they come, and once all are in the responses are fed. False when
    /// nothing moved (the engine may wait a little).
    pub(super) fn tools_step(&mut self, tab: TabId) -> bool {
        let (tok, context) = (self.tok, self.context);
        let (Some(tools), Some(t)) = (self.tools.as_mut(), self.tabs.get_mut(tab)) else {
            return false;
        };
        let Some(job) = t.job.as_mut() else {
            return false;
        };
        let Some(jt) = job.tools.as_mut() else {
            // Nothing runs tools for this turn: it ends here.
            job.turn.cancel();
            return true;
        };
        let mut events = Vec::new();
        let run = match &mut jt.run {
            Some(run) => run,
            None => {
                let batch = calls_in(job.turn.answer(), tools.text.ids);
                let place = HandOver {
                    tab,
                    at: job.answer_text.len(),
                    number: jt.handovers,
                };
                jt.handovers += 1;
                if jt.client {
                    let calls = client_calls(&mut t.tools, tok, batch, place);
                    jt.made.extend(calls.iter().map(|c| CallMade::new(c, None)));
                    job.turn.hand_back();
                    for call in calls {
                        self.emit(Event::ToolCall {
                            tab,
                            call,
                            approval: false,
                        });
                    }
                    return true;
                }
                let (run, ev) =
                    ToolRun::start(tools, &mut t.tools, &jt.declared, tok, batch, place);
                events = ev;
                jt.run.insert(run)
            }
        };
        events.extend(run.poll(tab));
        let moved = !events.is_empty();
        let done = run.done();
        if done {
            let limit = t.context.min(context);
            let room = limit.saturating_sub(job.turn.end_position() + 1 + ANSWER_ROOM);
            let ids = run.response_ids(tools, tok, room);
            let calls = run.calls();
            jt.made.extend(run.made());
            jt.run = None;
            job.resume(&ids, calls);
        }
        for e in events {
            self.emit(e);
        }
        moved || done
    }

    /// The user's decision on call `call` of `tab`.
    pub(super) fn decide(&mut self, tab: TabId, call: u64, decision: ToolDecision) -> Result<()> {
        let (Some(tools), Some(t)) = (self.tools.as_mut(), self.tabs.get_mut(tab)) else {
            return Err(Error::Invalid("no tool call waits in this tab".into()));
        };
        let run = t
            .job
            .as_mut()
            .and_then(|j| j.tools.as_mut())
            .and_then(|jt| jt.run.as_mut());
        let Some(run) = run else {
            return Err(Error::Invalid("no tool call waits in this tab".into()));
        };
        let (found, events) = run.decide(tools, &mut t.tools, call, decision, tab);
        for e in events {
            self.emit(e);
        }
        if !found {
            return Err(Error::Invalid(format!(
                "tool call {call} does not wait for a decision (it was answered or stopped)"
            )));
        }
        Ok(())
    }

    /// Esc while the tab's turn waits for its tools: every call still asking or running is
    /// stopped, the model gets `stopped` responses (so the conversation stays well-formed) and
    /// the turn ends.
    pub(super) fn stop_tools(&mut self, tab: TabId) {
        let waiting = self
            .tabs
            .get_mut(tab)
            .and_then(|t| t.job.as_ref())
            .is_some_and(|j| j.turn.paused() && j.tools.is_some());
        if !waiting {
            return;
        }
        // Makes sure the calls were read (the hand-over may be this very step's).
        self.tools_step(tab);
        if let Some(run) = self
            .tabs
            .get_mut(tab)
            .and_then(|t| t.job.as_mut())
            .and_then(|j| j.tools.as_mut())
            .and_then(|jt| jt.run.as_mut())
        {
            let events = run.stop(tab);
            for e in events {
                self.emit(e);
            }
        }
        self.tools_step(tab);
    }

    /// Whether every running turn waits for its tools (nothing to compute until one answers).
    pub(super) fn all_waiting(&self) -> bool {
        !self.tabs.encoding()
            && self.tabs.jobs().all(|j| {
                j.turn.paused()
                    && j.tools
                        .as_ref()
                        .and_then(|t| t.run.as_ref())
                        .is_some_and(|r| !r.done())
            })
    }

    /// The engine's writer of tool calls and responses, for the renders of rebuilt
    /// conversations (`None`: the model calls no tools, or the engine has none).
    pub(super) fn tool_text(&self) -> Option<Arc<crate::tools::ToolText>> {
        self.tools.as_ref().map(|t| t.text.clone())
    }

    /// Tells the UI the tools the engine can run.
    pub(super) fn report_tools(&self) {
        if let Some(host) = self.tools.as_ref().and_then(|t| t.host.as_ref()) {
            self.emit(catalogue_of(host));
        }
    }
}

/// A hand-over's calls to a front end's own tools, as the front end is told them: each read
/// from the model's syntax into JSON arguments (a call that cannot be read, which the grammar
/// prevents unless a call was finished by force, keeps its text under `"call"`).
fn client_calls(
    tab_tools: &mut TabTools,
    tok: &gemma_model::tokenizer::Tokenizer,
    batch: Vec<Vec<u32>>,
    place: HandOver,
) -> Vec<ToolCall> {
    batch
        .into_iter()
        .map(|ids| {
            let a = Attempt::read(tok, &ids);
            let arguments = match a.arguments {
                Ok(args) => serde_json::Value::Object(args),
                Err(_) => serde_json::json!({ "call": a.written }),
            };
            tab_tools.last_call += 1;
            ToolCall {
                id: tab_tools.last_call,
                name: a.name,
                server: CLIENT.into(),
                arguments: arguments.to_string(),
                written: a.written,
                at: place.at,
                handover: place.number,
            }
        })
        .collect()
}

/// `host`'s catalogue as an event.
pub(crate) fn catalogue_of(host: &gemma_tools::host::ToolHost) -> Event {
    Event::Tools {
        servers: host.servers(),
        tools: host
            .tools()
            .into_iter()
            .map(|t| crate::protocol::ToolInfo {
                parameters: t.parameters.to_string(),
                name: t.name,
                server: t.server,
                description: t.description,
                auto_approve: t.auto_approve,
            })
            .collect(),
    }
}
