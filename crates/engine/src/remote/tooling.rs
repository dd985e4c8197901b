//! Tool calls in the remote engine, on the serving loop: the tools a tab declares (sent as
//! OpenAI `tools`), and a turn that calls them ([`ToolTurn`]): when a request's answer ends in
//! `tool_calls`, they run through the same [`ToolRun`] as the local engine's (asked about, run
//! on the host, polled, decided, stopped on Esc), within the turn's `max_calls`; their results
//! go back as `role: "tool"` messages after the assistant message with its `tool_calls`, and the
//! request is sent again so the model goes on. The rounds' messages join the tab's history so
//! that later turns re-send them; the turn's stats add up its rounds.

use serde_json::{Value, json};

use super::answer::Budget;
use super::calls::{WireCall, attempt, round_messages};
use super::serve::{Server, after};
use super::turn::{TurnDone, TurnJob, estimate, stats};
use crate::protocol::{TabId, ToolChoice, ToolDecision, TurnEnd, TurnStats};
use crate::tools::run::{Attempt, HandOver, ToolRun};
use gemma_tools::host::ToolSpec;

/// The calls of one answer, while they run.
#[derive(Debug)]
struct Waiting {
    run: ToolRun,
    /// Each call as sent and as read.
    calls: Vec<(WireCall, Attempt)>,
    /// The answer's text before its calls.
    text: String,
    /// The request the answer came from, which the next one extends.
    body: Value,
    /// Whether a call of this answer was within the turn's limit (else the turn ends after
    /// these responses).
    again: bool,
}

/// A turn that declares tools: its rounds so far.
#[derive(Debug)]
pub(super) struct ToolTurn {
    declared: Vec<ToolSpec>,
    choice: ToolChoice,
    slot: Option<usize>,
    budget: Budget,
    /// The conversation's tokens before the turn, and whether it had history (for the stats).
    before: usize,
    had_history: bool,
    /// The round-trips' messages so far (assistant `tool_calls` and `tool` messages).
    messages: Vec<Value>,
    /// Calls the model made.
    calls: usize,
    /// The rounds as one: all their text, the last one's end and counts.
    merged: Option<TurnDone>,
    /// The first round's stats.
    first: Option<TurnStats>,
    /// The last round's text (the answer after the last responses).
    tail: String,
    generated: usize,
    decode_s: f64,
    /// Tokens the responses added by the server's counts (`None` once a round had none), and
    /// by an estimate.
    tool_tokens: Option<usize>,
    tool_estimate: usize,
    /// The last round's prompt and answer tokens, by the server's count.
    last_total: Option<usize>,
    waiting: Option<Waiting>,
}

impl ToolTurn {
    pub fn new(
        declared: Vec<ToolSpec>,
        choice: ToolChoice,
        slot: Option<usize>,
        budget: Budget,
        before: usize,
        had_history: bool,
    ) -> Self {
        Self {
            declared,
            choice,
            slot,
            budget,
            before,
            had_history,
            messages: Vec::new(),
            calls: 0,
            merged: None,
            first: None,
            tail: String::new(),
            generated: 0,
            decode_s: 0.0,
            tool_tokens: Some(0),
            tool_estimate: 0,
            last_total: None,
            waiting: None,
        }
    }

    /// One round's end into the turn.
    fn absorb(&mut self, d: TurnDone) {
        let total = d
            .usage
            .as_ref()
            .map(|u| u.prompt_tokens.saturating_add(u.completion_tokens));
        if self.first.is_none() {
            self.first = Some(stats(&d, self.before, self.had_history));
        } else {
            let added = match (&d.usage, self.last_total) {
                (Some(u), Some(last)) => Some(u.prompt_tokens.saturating_sub(last)),
                _ => None,
            };
            self.tool_tokens = self.tool_tokens.zip(added).map(|(a, b)| a + b);
        }
        self.last_total = total;
        self.generated += d.usage.as_ref().map_or(d.pieces, |u| u.completion_tokens);
        self.decode_s += d.decode_s;
        self.tail = d.answer.clone();
        match &mut self.merged {
            None => self.merged = Some(d),
            Some(m) => {
                m.answer.push_str(&d.answer);
                m.end = d.end;
                m.usage = d.usage;
                m.counted = d.counted;
                m.pieces += d.pieces;
            }
        }
    }

    /// The turn's stats: the first round's, with every round's answer tokens and the calls.
    fn stats(&self) -> Option<TurnStats> {
        let mut s = self.first.clone()?;
        if self.messages.is_empty() {
            return Some(s);
        }
        s.generated_tokens = self.generated;
        if self.decode_s > 0.0 {
            s.decode_tok_s = self.generated as f64 / self.decode_s;
        }
        s.tool_calls = self.calls;
        s.tool_tokens = self.tool_tokens.unwrap_or(self.tool_estimate);
        Some(s)
    }

    /// `tool_choice` for the next request: `auto` after a `required` call.
    fn next_choice(&self) -> &'static str {
        match self.choice {
            ToolChoice::Required => ToolChoice::Auto.as_str(),
            c => c.as_str(),
        }
    }
}

/// Bounds the calls of a request's answer by what the turn has `left`: `tool_choice = none`
/// when no call is left, `parallel_tool_calls = false` when one is.
pub(super) fn bound_calls(body: &mut Value, left: usize) {
    match left {
        0 => body["tool_choice"] = json!(ToolChoice::None.as_str()),
        1 => body["parallel_tool_calls"] = json!(false),
        _ => {}
    }
}

impl Server {
    /// The tools `tab` declares now (none without a host, or with tools off), by name.
    pub(super) fn declared(&mut self, tab: TabId) -> Vec<ToolSpec> {
        let Some(host) = &self.host else {
            return Vec::new();
        };
        let t = self.tabs.entry(tab).or_default();
        let mut tools: Vec<ToolSpec> = host
            .tools()
            .into_iter()
            .filter(|s| t.settings.tools.includes(&s.server, &s.name))
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// A request of a turn with tools ended: its calls start, or the turn ends.
    pub(super) fn round_done(&mut self, mut d: TurnDone) {
        let tab = d.tab;
        let calls = std::mem::take(&mut d.calls);
        let body = std::mem::take(&mut d.body);
        let text = d.answer.clone();
        let goes_on = matches!(d.end, Ok(TurnEnd::EndOfTurn(_))) && !calls.is_empty();
        let Some(turn) = self.tabs.get_mut(&tab).and_then(|t| t.turn.as_mut()) else {
            return;
        };
        turn.absorb(d);
        if goes_on && self.host.is_some() {
            self.start_calls(tab, calls, text, body);
        } else {
            self.end_turn(tab);
        }
    }

    /// Reads an answer's calls and starts them (those over the turn's limit, or made with
    /// `tool_choice = none`, fail with an error the model reads).
    fn start_calls(&mut self, tab: TabId, calls: Vec<WireCall>, text: String, body: Value) {
        let (Some(host), Some(t)) = (&self.host, self.tabs.get_mut(&tab)) else {
            return;
        };
        let Some(turn) = t.turn.as_mut() else { return };
        let max = host.limits().max_calls;
        let left = match turn.choice {
            ToolChoice::None => 0,
            _ => max.saturating_sub(turn.calls),
        };
        let read: Vec<(WireCall, Attempt)> = calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let mut a = attempt(&c);
                if i >= left {
                    a.arguments = Err(match turn.choice {
                        ToolChoice::None => "tool_choice is none: no call may run".into(),
                        _ => format!(
                            "over the limit of {max} tool calls in one turn; answer without \
                             calling more tools"
                        ),
                    });
                }
                (c, a)
            })
            .collect();
        turn.calls += read.len();
        let attempts = read.iter().map(|(_, a)| a.clone()).collect();
        // Where in the answer: after every round's text so far, the rounds with calls before.
        let place = HandOver {
            tab,
            at: turn.merged.as_ref().map_or(0, |m| m.answer.len()),
            number: turn
                .messages
                .iter()
                .filter(|m| m["role"] == "assistant")
                .count(),
        };
        let (run, events) = ToolRun::begin(
            Some(host),
            &self.always,
            &mut t.tools,
            &turn.declared,
            attempts,
            place,
        );
        turn.tail.clear();
        turn.waiting = Some(Waiting {
            run,
            calls: read,
            text,
            body,
            again: left > 0,
        });
        for e in events {
            let _ = self.events.send(e);
        }
        self.poll_tab(tab);
    }

    /// Whether some tab's calls are running (the loop looks for their results).
    pub(super) fn tools_running(&self) -> bool {
        self.tabs
            .values()
            .any(|t| t.turn.as_ref().is_some_and(|turn| turn.waiting.is_some()))
    }

    /// Takes the results that came in; a tab whose calls are all over goes on.
    pub(super) fn poll_tools(&mut self) {
        let tabs: Vec<TabId> = self
            .tabs
            .iter()
            .filter(|(_, t)| t.turn.as_ref().is_some_and(|turn| turn.waiting.is_some()))
            .map(|(id, _)| *id)
            .collect();
        for tab in tabs {
            self.poll_tab(tab);
        }
    }

    fn poll_tab(&mut self, tab: TabId) {
        let Some(w) = self.waiting(tab) else { return };
        let events = w.run.poll(tab);
        let done = w.run.done();
        for e in events {
            let _ = self.events.send(e);
        }
        if done {
            self.after_calls(tab, true);
        }
    }

    fn waiting(&mut self, tab: TabId) -> Option<&mut Waiting> {
        self.tabs.get_mut(&tab)?.turn.as_mut()?.waiting.as_mut()
    }

    /// The user's decision on call `call` of `tab`.
    pub(super) fn decide(&mut self, tab: TabId, call: u64, decision: ToolDecision) {
        let found = match (&self.host, self.tabs.get_mut(&tab)) {
            (Some(host), Some(t)) => match t.turn.as_mut().and_then(|x| x.waiting.as_mut()) {
                Some(w) => {
                    let (found, events) = w.run.decide_on(
                        Some(host),
                        &mut self.always,
                        &mut t.tools,
                        call,
                        decision,
                        tab,
                    );
                    for e in events {
                        let _ = self.events.send(e);
                    }
                    found
                }
                None => false,
            },
            _ => false,
        };
        if found {
            self.poll_tab(tab);
        } else {
            self.fail(
                tab,
                &format!(
                    "tool call {call} does not wait for a decision (it was answered or stopped)"
                ),
            );
        }
    }

    /// Esc while `tab`'s calls run or wait: each is stopped, the model's conversation gets
    /// `stopped` responses (so it stays well-formed) and the turn ends, cancelled.
    pub(super) fn stop_tools(&mut self, tab: TabId) {
        let Some(w) = self.waiting(tab) else { return };
        let events = w.run.stop(tab);
        for e in events {
            let _ = self.events.send(e);
        }
        self.after_calls(tab, false);
    }

    /// Every call of the tab's answer is over: the round-trip joins the request, which is sent
    /// again (`go_on`, and a call was within the limit), or the turn ends.
    fn after_calls(&mut self, tab: TabId, go_on: bool) {
        let max = self.host.as_ref().map_or(0, |h| h.limits().max_calls);
        let max_bytes = self
            .host
            .as_ref()
            .map_or(16 << 10, |h| h.limits().max_result_bytes);
        let Some(turn) = self.tabs.get_mut(&tab).and_then(|t| t.turn.as_mut()) else {
            return;
        };
        let Some(w) = turn.waiting.take() else { return };
        let responses = w.run.response_texts(max_bytes.saturating_add(256));
        let messages = round_messages(&w.text, &w.calls, &responses);
        turn.tool_estimate += estimate(&messages[1..]);
        turn.messages.extend(messages.iter().cloned());
        if !go_on || !w.again {
            if !go_on && let Some(m) = turn.merged.as_mut() {
                m.end = Ok(TurnEnd::Cancelled);
            }
            return self.end_turn(tab);
        }
        let mut body = w.body;
        if let Some(list) = body["messages"].as_array_mut() {
            list.extend(messages);
        }
        body["tool_choice"] = json!(turn.next_choice());
        bound_calls(&mut body, max.saturating_sub(turn.calls));
        let job = TurnJob {
            tab,
            user: turn
                .merged
                .as_ref()
                .map(|m| m.user.clone())
                .unwrap_or_default(),
            messages_after: after(&body),
            body,
            slot: turn.slot,
            budget: turn.budget,
            quiet: false,
        };
        self.spawn(job);
    }

    /// The turn ends: its rounds as one exchange, with their messages.
    fn end_turn(&mut self, tab: TabId) {
        let Some(mut turn) = self.tabs.get_mut(&tab).and_then(|t| t.turn.take()) else {
            return;
        };
        let (Some(merged), Some(stats)) = (turn.merged.take(), turn.stats()) else {
            return;
        };
        let mut replies = std::mem::take(&mut turn.messages);
        if !replies.is_empty() {
            replies.push(json!({"role": "assistant", "content": turn.tail}));
        }
        self.commit(merged, stats, replies);
    }
}
