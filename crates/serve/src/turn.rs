//! One answer on a slot ([`answer`]): the tab's settings, the conversation's path and the user's
//! message sent to the engine, then its events turned into what the HTTP side writes ([`Out`]).
//! A client that goes away cancels the turn; the turn is still drained to its end, so the slot
//! is given back with its conversation intact.

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::mpsc::Sender;

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
    /// The answer ended.
    Done(Done),
    /// It failed (a 400 when nothing had been said yet: the request could not be answered).
    Failed(ApiError),
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
    /// The request's messages (their keys), which the slot holds after the answer.
    pub keys: Vec<String>,
}

/// Runs the turn on `lease`'s tab, telling `out` as it goes.
pub(crate) async fn answer(
    engine: Arc<Engine>,
    mut lease: Lease,
    input: TurnInput,
    out: Sender<Out>,
) {
    let tab = lease.tab;
    // What the tab said while idle (its tier moving under the memory budget) is not this turn's.
    while lease.events.try_recv().is_ok() {}
    let sent = engine.send(Command::Configure {
        tab,
        settings: Box::new(input.settings),
    }) && engine.send(Command::SetPath {
        tab,
        history: input.history,
    }) && engine.send(Command::Submit {
        tab,
        text: input.text,
        images: input.media,
    });
    if !sent {
        let _ = out.send(Out::Failed(stopped(engine.stopped()))).await;
        return;
    }
    let (mut text, mut gone) = (String::new(), false);
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
                Out::Text(t)
            }
            Some(Event::Thought { text: t, .. }) => Out::Thought(t),
            Some(Event::Finished { end, stats, .. }) => {
                let mut keys = input.keys;
                keys.push(crate::wire::answer_key(&text));
                lease.keep(keys);
                let _ = out.send(Out::Done(Done::of(end, &stats))).await;
                return;
            }
            Some(Event::Failed { error, .. }) => {
                let status = if text.is_empty() {
                    StatusCode::BAD_REQUEST
                } else {
                    StatusCode::INTERNAL_SERVER_ERROR
                };
                let kind = if text.is_empty() {
                    "invalid_request_error"
                } else {
                    "server_error"
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
