//! One answer on a slot ([`answer`]): the tab's settings, the conversation's path and the user's
//! message (or, after tool results, the word to go on) sent to the engine, then its events turned
//! into what the HTTP side writes ([`Out`]); the model's calls of the client's tools end it.
//! A client that goes away cancels the turn; the turn is still drained to its end, so the slot
//! is given back with its conversation intact.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use tokio::sync::mpsc::Sender;

use crate::calls::CallBook;
use crate::error::ApiError;
use crate::pump::Engine;
use crate::slots::Lease;
use gemma_protocol::{Attachment, Command, Event, Exchange, TabSettings, TurnEnd, TurnStats};

/// What a turn tells the HTTP side, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Out {
    /// More answer text.
    Text(String),
    /// More thought text (Gemma 4 thinking).
    Thought(String),
    /// The model called one of the client's tools.
    Call(ApiCall),
    /// The answer ended.
    Done(Done),
    /// It failed (a 400 when nothing had been said yet: the request could not be answered).
    Failed(ApiError),
}

/// A call of the client's tools, as the API gives it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiCall {
    pub id: String,
    pub name: String,
    /// JSON text (an object).
    pub arguments: String,
}

/// How an answer ended and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Done {
    /// OpenAI's `finish_reason`.
    pub finish: &'static str,
    /// Prompt tokens (resident and prefilled).
    pub prompt: usize,
    /// Of those, already resident (`cached_tokens`).
    pub cached: usize,
    /// Tokens generated.
    pub completion: usize,
    /// Thought tokens among them.
    pub reasoning: usize,
}

impl Done {
    fn of(end: TurnEnd, s: &TurnStats) -> Self {
        Self {
            finish: match end {
                TurnEnd::Length | TurnEnd::ContextFull => "length",
                TurnEnd::ToolCalls => "tool_calls",
                _ => "stop",
            },
            prompt: s.reused_tokens + s.prefilled_tokens,
            cached: s.reused_tokens,
            completion: s.generated_tokens,
            reasoning: s.thought_tokens,
        }
    }
}

/// What one turn sends the engine.
pub(crate) struct TurnInput {
    pub settings: TabSettings,
    pub history: Vec<Exchange>,
    pub text: String,
    pub media: Vec<Attachment>,
    /// The model answers on from the last exchange's tool results instead of a new message.
    pub continues: bool,
    /// The answer is JSON, written through the call grammar (`Some(wrapped)`: its value is the
    /// call's arguments, or their `value` when wrapped).
    pub json: Option<bool>,
    /// The answer it goes on with: its text and its calls' keys.
    pub prior: (String, Vec<String>),
    /// The request's messages (their keys), which the slot holds after the answer.
    pub keys: Vec<String>,
    /// The request's number (its calls' ids).
    pub number: u64,
}

/// Runs the turn on `lease`'s tab, telling `out` as it goes.
pub(crate) async fn answer(
    engine: Arc<Engine>,
    mut lease: Lease,
    mut input: TurnInput,
    (book, out): (Arc<Mutex<CallBook>>, Sender<Out>),
) {
    let tab = lease.tab;
    // What the tab said while idle (its tier moving under the memory budget) is not this turn's.
    while lease.events.try_recv().is_ok() {}
    let (text, calls) = std::mem::take(&mut input.prior);
    let mut said = Said {
        text,
        calls,
        spoke: false,
        json: input.json,
        number: input.number,
        book,
    };
    let keys = std::mem::take(&mut input.keys);
    if !send(&engine, &mut lease, input) {
        let _ = out.send(Out::Failed(stopped(engine.stopped()))).await;
        return;
    }
    let mut gone = false;
    loop {
        let event = tokio::select! {
            e = lease.events.recv() => e,
            () = out.closed(), if !gone => {
                // The client went away: stop the turn, and drain it to its end below.
                gone = true;
                engine.send(Command::Cancel { tab });
                continue;
            }
        };
        let told = match event {
            None | Some(Event::EngineStopped { .. }) => {
                let _ = out.send(Out::Failed(stopped(engine.stopped()))).await;
                return;
            }
            Some(Event::Finished { end, stats, .. }) => {
                let mut keys = keys;
                keys.push(crate::wire::answer_key(&said.text, &said.calls));
                lease.keep(keys);
                let _ = out.send(Out::Done(said.done(end, &stats))).await;
                return;
            }
            Some(Event::Failed { error, .. }) => {
                let _ = out.send(Out::Failed(said.failure(error))).await;
                return;
            }
            Some(e) => match said.out(e) {
                Some(o) => o,
                None => continue,
            },
        };
        if !gone && out.send(told).await.is_err() {
            gone = true;
            engine.send(Command::Cancel { tab });
        }
    }
}

/// Sends the turn's commands: its settings, the chat its conversation is (when the slot changes
/// conversations), its path and the message (or the word to go on); false when the engine is
/// gone.
fn send(engine: &Engine, lease: &mut Lease, input: TurnInput) -> bool {
    let tab = lease.tab;
    let go = match input.continues {
        true => Command::Continue { tab },
        false => Command::Submit {
            tab,
            text: input.text,
            images: input.media,
        },
    };
    let configured = engine.send(Command::Configure {
        tab,
        settings: Box::new(input.settings),
    });
    // A conversation new to the slot is a chat of its own; a parked one comes back warm from
    // the engine's disk (the exchanges it held, so that they keep their ids).
    let attached = match lease.attach.take() {
        Some(a) => engine.send(Command::Attach {
            tab,
            chat: a.chat,
            history: input.history[..a.exchanges.min(input.history.len())].to_vec(),
            legacy: None,
        }),
        None => true,
    };
    configured
        && attached
        && engine.send(Command::SetPath {
            tab,
            history: input.history,
        })
        && engine.send(go)
}

/// What a turn has said so far, and how its events become the client's.
struct Said {
    /// The answer's text (after the one it goes on with).
    text: String,
    /// Its calls' keys.
    calls: Vec<String>,
    /// Anything went out (a failure after that is the server's, not the request's).
    spoke: bool,
    /// See [`TurnInput::json`].
    json: Option<bool>,
    /// The request's number.
    number: u64,
    book: Arc<Mutex<CallBook>>,
}

impl Said {
    /// What event `e` tells the client (`None`: nothing).
    fn out(&mut self, e: Event) -> Option<Out> {
        let o = match e {
            Event::Token { text, .. } => {
                self.text.push_str(&text);
                Out::Text(text)
            }
            Event::Thought { text, .. } => return Some(Out::Thought(text)),
            // A JSON answer is its first call (one hand-over may hold more).
            Event::ToolCall { .. } if self.json.is_some() && self.spoke => return None,
            Event::ToolCall { call, .. } if self.json.is_some() => {
                let value = json_answer(&call.arguments, self.json == Some(true));
                self.text.push_str(&value);
                Out::Text(value)
            }
            Event::ToolCall { call, .. } => {
                let id = format!("call_{:x}_{}", self.number, call.id);
                let mut b = self.book.lock().unwrap_or_else(|p| p.into_inner());
                b.keep(&id, &call.arguments, &call.written);
                self.calls
                    .push(crate::wire::call_key(&call.name, &call.arguments));
                Out::Call(ApiCall {
                    id,
                    name: call.name,
                    arguments: call.arguments,
                })
            }
            _ => return None,
        };
        self.spoke = true;
        Some(o)
    }

    /// How the turn ended, as the API says it.
    fn done(&self, end: TurnEnd, stats: &TurnStats) -> Done {
        let mut done = Done::of(end, stats);
        if self.json.is_some() && end == TurnEnd::ToolCalls {
            // The JSON answer is whole: it stopped as an answer does.
            done.finish = "stop";
        }
        done
    }

    /// A failure: the request's (400) while nothing was said, the server's after.
    fn failure(&self, error: String) -> ApiError {
        let (status, kind) = match self.spoke {
            false => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            true => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        };
        ApiError::status(status, kind, error)
    }
}

/// The answer a JSON call's `arguments` carry (their `value` when `wrapped`).
fn json_answer(arguments: &str, wrapped: bool) -> String {
    match wrapped {
        false => arguments.to_string(),
        true => serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|v| v.get("value").map(|x| x.to_string()))
            .unwrap_or_else(|| arguments.to_string()),
    }
}

fn stopped(why: Option<String>) -> ApiError {
    ApiError::status(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        format!(
            "the engine stopped: {}",
            why.unwrap_or_else(|| "no reason given".into())
        ),
    )
}
