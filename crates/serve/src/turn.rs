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
    input: TurnInput,
    (book, out): (Arc<Mutex<CallBook>>, Sender<Out>),
) {
    let tab = lease.tab;
    // What the tab said while idle (its tier moving under the memory budget) is not this turn's.
    while lease.events.try_recv().is_ok() {}
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
    let sent = configured
        && attached
        && engine.send(Command::SetPath {
            tab,
            history: input.history,
        })
        && engine.send(go);
    if !sent {
        let _ = out.send(Out::Failed(stopped(engine.stopped()))).await;
        return;
    }
    let (mut text, mut calls) = input.prior;
    let (mut spoke, mut gone) = (false, false);
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
        let said = match event {
            None | Some(Event::EngineStopped { .. }) => {
                let _ = out.send(Out::Failed(stopped(engine.stopped()))).await;
                return;
            }
            Some(Event::Token { text: t, .. }) => {
                text.push_str(&t);
                spoke = true;
                Out::Text(t)
            }
            Some(Event::Thought { text: t, .. }) => Out::Thought(t),
            // A JSON answer is its first call (one hand-over may hold more).
            Some(Event::ToolCall { .. }) if input.json.is_some() && spoke => continue,
            Some(Event::ToolCall { call, .. }) if input.json.is_some() => {
                let value = json_answer(&call.arguments, input.json == Some(true));
                text.push_str(&value);
                spoke = true;
                Out::Text(value)
            }
            Some(Event::ToolCall { call, .. }) => {
                let id = format!("call_{:x}_{}", input.number, call.id);
                let mut b = book.lock().unwrap_or_else(|p| p.into_inner());
                b.keep(&id, &call.arguments, &call.written);
                calls.push(crate::wire::call_key(&call.name, &call.arguments));
                spoke = true;
                Out::Call(ApiCall {
                    id,
                    name: call.name,
                    arguments: call.arguments,
                })
            }
            Some(Event::Finished { end, stats, .. }) => {
                let mut keys = input.keys;
                keys.push(crate::wire::answer_key(&text, &calls));
                lease.keep(keys);
                let mut done = Done::of(end, &stats);
                if input.json.is_some() && end == TurnEnd::ToolCalls {
                    // The JSON answer is whole: it stopped as an answer does.
                    done.finish = "stop";
                }
                let _ = out.send(Out::Done(done)).await;
                return;
            }
            Some(Event::Failed { error, .. }) => {
                let (status, kind) = match spoke {
                    false => (StatusCode::BAD_REQUEST, "invalid_request_error"),
                    true => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
                };
                let _ = out
                    .send(Out::Failed(ApiError::status(status, kind, error)))
                    .await;
                return;
            }
            Some(_) => continue,
        };
        if !gone && out.send(said).await.is_err() {
            gone = true;
            engine.send(Command::Cancel { tab });
        }
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
