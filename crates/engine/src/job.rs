//! A turn running on the engine thread ([`Job`]): the [`Turn`] and its [`Reply`], advanced a step
//! at a time with the step's events sent to the UI. A quiet job only prefills, silently: it is how
//! the `strip` thinking policy re-prefills an answer without its thought.

use std::sync::mpsc::Sender;

use super::branch::Held;
use super::images::Image;
use super::protocol::{Event, TabId, TurnEnd};
use super::reply::{Piece, Reply};
use super::session::Session;
use super::turn::{Step, Turn};
use gemma_model::error::Result;
use gemma_model::model::Gemma;
use gemma_model::tokenizer::Tokenizer;

/// Prompt tokens per prefill step.
pub(super) const CHUNK: usize = 128;

/// A turn in progress in one tab.
pub(super) struct Job {
    pub turn: Turn,
    pub reply: Reply,
    /// The conversation header (after BOS) the prompt was built with.
    pub header: Vec<u32>,
    /// Prefill only, silently, then end (no sampling, no events).
    pub quiet: bool,
    /// The exchanges before this turn's and its user text, when known: the tab's exchanges
    /// once the turn commits.
    pub exchange: Option<(Vec<Held>, String)>,
    /// The answer's text as the UI was sent it.
    pub answer_text: String,
    /// The pictures of the prompt: the tab's once the turn commits.
    pub images: Vec<Image>,
}

/// What a job needs from the engine for one step.
pub(super) struct Ctx<'a> {
    pub tab: TabId,
    pub model: &'a Gemma,
    pub tok: &'a Tokenizer,
    pub events: &'a Sender<Event>,
}

impl Job {
    /// One prefill chunk or decode step, its events sent; the turn's end once it has ended.
    pub fn advance(&mut self, cx: &Ctx, session: &mut Session) -> Result<Option<TurnEnd>> {
        let tab = cx.tab;
        match self.turn.step(cx.model, session)? {
            Step::Prefill { done, total } => {
                if !self.quiet {
                    let reused = self.turn.stats().reused_tokens;
                    let _ = cx.events.send(Event::Prefill {
                        tab,
                        done,
                        total,
                        reused,
                    });
                }
                Ok(None)
            }
            Step::Token(id) => {
                let (piece, stop_string) = self.reply.push(cx.tok, id)?;
                if let Some(p) = piece {
                    self.send(cx, p);
                }
                if stop_string {
                    let keep = self.reply.kept_tokens(cx.tok, self.turn.answer())?;
                    self.turn.cut(keep, cx.model, session)?;
                    return Ok(self.turn.end());
                }
                Ok(None)
            }
            Step::Finished(end) => {
                if !self.quiet
                    && let Some(p) = self.reply.finish(cx.tok)?
                {
                    self.send(cx, p);
                }
                Ok(Some(end))
            }
        }
    }

    /// Sends a piece of the reply, keeping the answer's text.
    fn send(&mut self, cx: &Ctx, p: Piece) {
        if let Piece::Answer(text) = &p {
            self.answer_text.push_str(text);
        }
        let _ = cx.events.send(event(cx.tab, p));
    }
}

fn event(tab: TabId, piece: Piece) -> Event {
    match piece {
        Piece::Answer(text) => Event::Token { tab, text },
        Piece::Thought(text) => Event::Thought { tab, text },
    }
}
