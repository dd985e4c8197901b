//! One remote turn (or one round of it, when it calls tools), as a task of its own: the request
//! sent, the answer streamed to the UI as `Prefill`, `Thought` and `Token` events (the API key
//! taken out of the text), its tool calls assembled ([`Calls`]), stopped at once
//! on cancel (the stream is dropped, which closes the connection; a llama-server slot still busy
//! is waited for before the turn ends, so the next request on it does not race), and what came
//! back reported to the serving loop, with the turn's stats from the server's numbers.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::answer::{Budget, Redactor};
use super::calls::{Calls, WireCall};
use super::client::{Client, RemoteError};
use super::info::ServerInfo;
use super::wire::{Finish, Piece, Usage};
use crate::protocol::{Event, Reuse, TabId, TurnEnd, TurnStats};

/// How a remote turn went.
#[derive(Debug)]
pub(super) struct TurnDone {
    /// The tab.
    pub tab: TabId,
    /// The user's message.
    pub user: String,
    /// The answer as it came (all of it, or what came before a failure).
    pub answer: String,
    /// How it ended, or why it failed.
    pub end: Result<TurnEnd, RemoteError>,
    /// The server's counts, when it sent them.
    pub usage: Option<Usage>,
    /// The conversation's tokens after the turn by the server's count, when usage did not say.
    pub counted: Option<usize>,
    /// Seconds to the first answer or thought text.
    pub ttft_s: f64,
    /// Seconds from the first text to the end.
    pub decode_s: f64,
    /// Pieces of text received (a stand-in for answer tokens when usage is missing).
    pub pieces: usize,
    /// The tool calls the answer made (their names and arguments with the API key taken out).
    pub calls: Vec<WireCall>,
    /// The request's body, given back for the next round of a turn that calls tools.
    pub body: Value,
}

/// The turn's events, with the API key taken out of the text.
struct Out<'a> {
    tab: TabId,
    events: &'a Sender<Event>,
    /// The answer is kept, not shown.
    quiet: bool,
    answer: Redactor,
    thought: Redactor,
}

impl Out<'_> {
    /// Answer text (`thought`: thought text) as far as it can be shown, to the UI and, for the
    /// answer, into the turn.
    fn send(&mut self, text: String, thought: bool, done: &mut TurnDone) {
        let text = if thought {
            self.thought.push(text)
        } else {
            self.answer.push(text)
        };
        self.emit(text, thought, done);
    }

    /// What was held back, at the end of the stream.
    fn flush(&mut self, done: &mut TurnDone) {
        let thought = self.thought.finish();
        self.emit(thought, true, done);
        let answer = self.answer.finish();
        self.emit(answer, false, done);
    }

    fn emit(&self, text: String, thought: bool, done: &mut TurnDone) {
        if text.is_empty() {
            return;
        }
        if self.quiet {
            if !thought {
                done.answer.push_str(&text);
            }
            return;
        }
        let tab = self.tab;
        let _ = self.events.send(if thought {
            Event::Thought {
                tab,
                text,
                tokens: 0,
            }
        } else {
            done.answer.push_str(&text);
            Event::Token { tab, text }
        });
    }
}

/// What a turn needs.
pub(super) struct TurnJob {
    pub tab: TabId,
    pub user: String,
    pub body: Value,
    pub slot: Option<usize>,
    /// What the answer may send.
    pub budget: Budget,
    /// The conversation after this turn, for the server's count when usage is missing.
    pub messages_after: Vec<Value>,
    /// Nothing is shown: the answer is kept (a summary).
    pub quiet: bool,
}

/// Runs `job` to its end; `cancel` stops it.
pub(super) async fn run(
    client: Client,
    info: ServerInfo,
    job: TurnJob,
    events: Sender<Event>,
    mut cancel: tokio::sync::oneshot::Receiver<()>,
) -> TurnDone {
    let started = Instant::now();
    let mut done = TurnDone {
        tab: job.tab,
        user: job.user,
        answer: String::new(),
        end: Ok(TurnEnd::Cancelled),
        usage: None,
        counted: None,
        ttft_s: 0.0,
        decode_s: 0.0,
        pieces: 0,
        calls: Vec::new(),
        body: Value::Null,
    };
    let mut seen = Seen {
        first: None,
        finish: None,
        noted: false,
        calls: Calls::default(),
        broken: None,
    };
    let mut out = Out {
        tab: job.tab,
        events: &events,
        quiet: job.quiet,
        answer: Redactor::new(client.secret()),
        thought: Redactor::new(client.secret()),
    };
    let stream = tokio::select! {
        s = client.stream(&job.body, job.budget) => Some(s),
        _ = &mut cancel => None,
    };
    let outcome = match stream {
        None => Ok(TurnEnd::Cancelled),
        Some(Err(e)) => Err(e),
        Some(Ok(answer)) => {
            let mut reading = Reading {
                client: &client,
                seen: &mut seen,
                done: &mut done,
                out: &mut out,
            };
            reading.read_to_end(answer, &mut cancel).await
        }
    };
    out.flush(&mut done);
    done.calls = std::mem::take(&mut seen.calls).finish();
    for c in &mut done.calls {
        c.name = client.scrub(&c.name);
        c.arguments = client.scrub(&c.arguments);
    }
    // The stream is dropped here: a cancelled or failed turn's connection is closed.
    let now = Instant::now();
    if let Some(f) = seen.first {
        done.ttft_s = f.duration_since(started).as_secs_f64();
        done.decode_s = now.duration_since(f).as_secs_f64();
    }
    if outcome.as_ref().is_ok_and(|e| *e == TurnEnd::Cancelled)
        && let Some(slot) = job.slot
    {
        free_slot(&client, slot, now).await;
    }
    if done.usage.is_none() {
        let mut messages = job.messages_after;
        if let Some(last) = messages.last_mut() {
            last["content"] = Value::String(done.answer.clone());
        }
        done.counted = client.count(&info, &messages).await;
    }
    done.end = outcome;
    done.body = job.body;
    done
}

/// Waits (a little) for the server to notice a cancelled turn and free its `slot`.
async fn free_slot(client: &Client, slot: usize, now: Instant) {
    let deadline = now + Duration::from_secs(10);
    while Instant::now() < deadline && client.slot_idle(slot).await == Some(false) {
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// A turn's stream being read: what it said so far, and where its text goes.
struct Reading<'a, 'b> {
    client: &'a Client,
    seen: &'a mut Seen,
    done: &'a mut TurnDone,
    out: &'a mut Out<'b>,
}

impl Reading<'_, '_> {
    /// Reads `answer` to its end (or `cancel`): how the turn ended.
    async fn read_to_end(
        &mut self,
        mut answer: super::answer::Answer,
        cancel: &mut tokio::sync::oneshot::Receiver<()>,
    ) -> Result<TurnEnd, RemoteError> {
        loop {
            let next = tokio::select! {
                n = answer.next() => n,
                _ = &mut *cancel => return Ok(TurnEnd::Cancelled),
            };
            match next {
                Ok(None) => return self.ended(),
                Err(e) => return Err(e),
                Ok(Some(pieces)) => {
                    if self.seen.take(pieces, self.done, self.out) {
                        return match self.seen.broken.take() {
                            Some(what) => Err(RemoteError::TooMuch {
                                url: self.client.url().to_string(),
                                what,
                            }),
                            None => self.ended(),
                        };
                    }
                }
            }
        }
    }

    /// The body ended (or said `[DONE]`): how, or, without a finish reason, that the server went
    /// away.
    fn ended(&self) -> Result<TurnEnd, RemoteError> {
        self.seen.finish.ok_or_else(|| RemoteError::Dropped {
            url: self.client.url().to_string(),
            why: "the stream ended before the answer did".into(),
        })
    }
}

/// What the stream has said so far: when its first text came, and how it said it ends.
struct Seen {
    first: Option<Instant>,
    finish: Option<TurnEnd>,
    /// A note on bad usage numbers was sent (once a turn is enough).
    noted: bool,
    /// The tool calls so far.
    calls: Calls,
    /// What broke the answer's bounds, when something did.
    broken: Option<String>,
}

impl Seen {
    /// One chunk's pieces into the turn and the UI's events; true when the stream said it is
    /// done.
    fn take(&mut self, pieces: Vec<Piece>, done: &mut TurnDone, out: &mut Out) -> bool {
        let tab = out.tab;
        let mut over = false;
        for p in pieces {
            match p {
                Piece::Progress {
                    total,
                    cache,
                    processed,
                } if !out.quiet => {
                    let _ = out.events.send(Event::Prefill {
                        tab,
                        done: processed.saturating_sub(cache),
                        total: total.saturating_sub(cache),
                        reused: cache,
                    });
                }
                Piece::Progress { .. } => {}
                Piece::Thought(text) => {
                    self.first.get_or_insert_with(Instant::now);
                    done.pieces += 1;
                    out.send(text, true, done);
                }
                Piece::Answer(text) => {
                    self.first.get_or_insert_with(Instant::now);
                    done.pieces += 1;
                    out.send(text, false, done);
                }
                Piece::ToolCall(d) => {
                    self.first.get_or_insert_with(Instant::now);
                    if let Err(what) = self.calls.push(d) {
                        self.broken = Some(what);
                        return true;
                    }
                }
                Piece::Finish(f) => {
                    self.finish = Some(match f {
                        Finish::Length => TurnEnd::Length,
                        Finish::Stop | Finish::ToolCalls | Finish::Other => TurnEnd::EndOfTurn(0),
                    });
                }
                Piece::Usage(u) => done.usage = Some(u),
                Piece::BadUsage(text) if !std::mem::replace(&mut self.noted, true) => {
                    let _ = out.events.send(Event::Notice { tab, text });
                }
                Piece::BadUsage(_) => {}
                Piece::Done => over = true,
            }
        }
        over
    }
}

/// A turn's stats from the server's numbers: what its cache held is `reused`, the rest
/// `prefilled`. A server never evaluates the last token it sampled, so a cache that holds all
/// of the history but that token is a whole prefix.
pub(super) fn stats(d: &TurnDone, before: usize, had_history: bool) -> TurnStats {
    let u = d.usage.clone().unwrap_or_default();
    let cached = u.cached_tokens.unwrap_or(0).min(u.prompt_tokens);
    let reuse = match (had_history, cached) {
        (false, 0) => Reuse::New,
        (true, 0) => Reuse::Evicted,
        (_, c) if c.saturating_add(1) >= before => Reuse::ExactPrefix,
        _ => Reuse::Rewind,
    };
    let generated = if d.usage.is_some() {
        u.completion_tokens
    } else {
        d.pieces
    };
    let prefilled = u.prompt_tokens.saturating_sub(cached);
    TurnStats {
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: 0,
        speculation: None,
        reuse,
        reused_tokens: cached,
        prefilled_tokens: prefilled,
        prefill_tok_s: u.prompt_per_second.unwrap_or_else(|| {
            if d.ttft_s > 0.0 {
                prefilled as f64 / d.ttft_s
            } else {
                0.0
            }
        }),
        decode_tok_s: u.predicted_per_second.unwrap_or_else(|| {
            if d.decode_s > 0.0 {
                generated as f64 / d.decode_s
            } else {
                0.0
            }
        }),
        ttft_s: d.ttft_s,
        generated_tokens: generated,
    }
}

/// A rough count where the server cannot count: four characters a token.
pub(super) fn estimate(messages: &[Value]) -> usize {
    messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(|c| c.chars().count() / 4 + 4)
        .sum()
}
