//! A turn running on the engine thread ([`Job`]): the [`Turn`] and its [`Reply`], advanced a step
//! at a time with the step's events sent to the UI. What it is for is its [`JobKind`]: an answer;
//! a settling re-prefill, silent (how the `strip` thinking policy re-prefills an answer without
//! its thought); or a summary, whose text is kept rather than sent.

use std::sync::mpsc::Sender;

use super::branch::Held;
use super::compact::Plan;
use super::images::MediaSpan;
use super::protocol::Attachment;
use super::protocol::{Event, TabId, TurnEnd};
use super::reply::{Piece, Reply};
use super::session::Session;
use super::tools::run::ToolRun;
use super::turn::{Step, Turn};
use crate::error::Result;
use gemma_model::model::Gemma;
use gemma_model::tokenizer::Tokenizer;
use gemma_tools::host::ToolSpec;

/// Prompt tokens per prefill step while other tabs have work too: a long prompt in one tab never
/// holds another's answer up for long.
pub(super) const CHUNK: usize = 128;

/// Prompt tokens per prefill step while no other tab has work: fewer, larger steps stream the
/// weights fewer times (bench's chunk; 11% faster on an 800-token prompt than [`CHUNK`] on two
/// cores), and a cancel still lands within one step (under a second there).
pub(super) const CHUNK_ALONE: usize = 512;

/// A turn in progress in one tab.
pub(super) struct Job {
    pub turn: Turn,
    pub reply: Reply,
    /// The conversation header (after BOS) the prompt was built with.
    pub header: Vec<u32>,
    /// An answer, a settling re-prefill or a summary.
    pub kind: JobKind,
    /// The exchanges before this turn's and its user text, when known: the tab's exchanges
    /// once the turn commits (the answer's earlier calls with them, when it goes on with one).
    pub exchange: Option<(Vec<Held>, crate::protocol::Exchange)>,
    /// The answer's text as the UI was sent it.
    pub answer_text: String,
    /// The pictures of the prompt: the tab's once the turn commits.
    pub images: Vec<MediaSpan>,
    /// The tools the turn declares and the calls it waits for.
    pub tools: Option<JobTools>,
    /// Where the answer's text starts after the last tool response (stop strings are looked
    /// for after it).
    pub text_start: usize,
    /// The turn goes on with the tab's last answer (`Command::Continue`), which starts here in
    /// the prompt.
    pub continues: Option<usize>,
}

/// What a job is for.
#[derive(Debug, Clone)]
pub(super) enum JobKind {
    /// A turn that answers the user: its text and events go to the UI.
    Answer,
    /// A settling re-prefill: prefill only, silently, then end (no sampling, no events).
    Settle,
    /// A summary to compact the conversation with: its text is kept, not sent.
    Summary(Pending),
}

impl JobKind {
    /// Whether it only prefills, silently.
    pub fn quiet(&self) -> bool {
        matches!(self, Self::Settle)
    }
}

/// A turn's tools.
#[derive(Debug, Default)]
pub(super) struct JobTools {
    /// Declared to the model, by name.
    pub declared: Vec<ToolSpec>,
    /// They are the front end's own: a hand-over ends the turn, the calls told to it.
    pub client: bool,
    /// The calls of the hand-over the turn waits for.
    pub run: Option<ToolRun>,
    /// The hand-overs so far.
    pub handovers: usize,
    /// The calls of the hand-overs over, as the transcript keeps them.
    pub made: Vec<crate::protocol::CallMade>,
}

/// A compaction under way: what its summary is for.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub plan: Plan,
    /// The conversation's tokens before.
    pub before: usize,
    /// The message that did not fit, sent once the conversation is compacted (`None`: `/compact`).
    pub resume: Option<Resume>,
}

/// A message sent again once its conversation is shorter.
#[derive(Debug, Clone)]
pub(super) struct Resume {
    pub text: String,
    pub attachments: Vec<Attachment>,
    /// Its pictures and recordings as they were encoded: sent again, they are not encoded again.
    pub encoded: Vec<crate::pictures::Encoded>,
    /// Shortenings still allowed before it (see `Worker::submit`).
    pub rounds: u8,
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
                if !self.kind.quiet() {
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
                    let from = self.text_start;
                    let keep = self
                        .reply
                        .kept_tokens(cx.tok, &self.turn.answer()[from..])?;
                    self.turn.cut(from + keep, cx.model, session)?;
                    return Ok(self.turn.end());
                }
                Ok(None)
            }
            Step::ToolToken(_) | Step::Feeding => Ok(None),
            Step::ToolCalls => {
                // The text before the call is shown whole; what follows the responses is
                // answer text of its own.
                if let Some(p) = self.reply.finish(cx.tok)? {
                    self.send(cx, p);
                }
                Ok(None)
            }
            Step::Finished(end) => {
                if !self.kind.quiet()
                    && let Some(p) = self.reply.finish(cx.tok)?
                {
                    self.send(cx, p);
                }
                Ok(Some(end))
            }
        }
    }

    /// The turn goes on after its tools' responses, `ids`, to `calls` calls.
    pub fn resume(&mut self, ids: &[u32], calls: usize) {
        self.turn.resume(ids, calls);
        self.text_start = self.turn.answer().len();
        self.reply.restart();
    }

    /// Sends a piece of the reply, keeping the answer's text (a summary's is kept only).
    fn send(&mut self, cx: &Ctx, p: Piece) {
        if let Piece::Answer(text) = &p {
            self.answer_text.push_str(text);
        }
        if matches!(self.kind, JobKind::Summary(_)) {
            return;
        }
        let tab = cx.tab;
        let _ = cx.events.send(match p {
            Piece::Answer(text) => Event::Token { tab, text },
            Piece::Thought(text) => Event::Thought {
                tab,
                text,
                tokens: self.turn.thought_tokens(),
            },
        });
    }
}
