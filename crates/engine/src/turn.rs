//! One turn of a conversation as a resumable state machine ([`Turn`]): reuse what the session
//! holds, prefill the rest a chunk per [`Turn::step`], then sample and feed a token per step until
//! an end-of-turn id, the token budget, the context limit or a cancel. Every caller drives this
//! one loop: the engine thread (a step at a time, round-robin over tabs), the line chat, `bench`,
//! `generate` and the tests ([`Turn::run`]). The turn's text (thoughts, stop strings) is
//! [`super::reply`]'s business; this module deals in ids.
//!
//! A tool call pauses the turn ([`Step::ToolCalls`]): a [`Guide`] keeps the sampled call
//! well-formed, the caller runs the tools and [`Turn::resume`]s with their responses, which are
//! fed warm, inside the same model turn, and decoding goes on.
//!
//! A thought budget ([`ThoughtBudget`]) counts the turn's thought tokens and steers the end of
//! its thought (a bias on the close, then a forced close); forced ids are chosen here, in place
//! of a sample, and flow out as any other token.
//!
//! Context policy, the only one: a turn starts when its prompt fits with room for one answer
//! token (`prompt + 1 ≤ context`), else it is refused before the session changes; an answer
//! that reaches the limit ends there ([`TurnEnd::ContextFull`]), the history never truncated.

use std::collections::VecDeque;
use std::time::Instant;

use burn::tensor::Tensor;

use super::budget::ThoughtBudget;
use super::images::{MediaSpan, chunk_end};
use super::protocol::{Reuse, TurnEnd, TurnStats};
use super::session::Session;
use super::speculate::Speculator;
use crate::error::{Error, Result};
use gemma_model::error::Error as ModelError;
use gemma_model::model::{Gemma, Logits};
use gemma_model::sampling::{NextLogits, Sampler};

mod clock;
mod pick;
mod steer;
mod verify;

use self::clock::TurnClock;

pub use self::steer::{Guide, Guided, Mask, TurnOptions};

/// What one [`Turn::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A prefill chunk: `done` of `total` prompt tokens to prefill.
    Prefill {
        /// Tokens prefilled so far.
        done: usize,
        /// Tokens to prefill in all.
        total: usize,
    },
    /// A sampled answer token (fed to the model at the next step, or when the turn ends).
    Token(u32),
    /// A sampled token of a tool call (`<|tool_call>` to `<tool_call|>`): part of the answer's
    /// ids, not of its text.
    ToolToken(u32),
    /// The model handed over to its tools (it sampled `<|tool_response>` after its calls): the
    /// turn waits for [`Turn::resume`] and every step says the same until then.
    ToolCalls,
    /// Tool responses fed to the model (a chunk of them).
    Feeding,
    /// The turn is over (every later step says the same).
    Finished(TurnEnd),
}

/// A turn in progress: its prompt (the whole conversation in ids), its answer so far and where
/// it stands.
#[derive(Debug)]
pub struct Turn {
    prompt: Vec<u32>,
    opts: TurnOptions,
    reuse: Reuse,
    reused: usize,
    prefilled: usize,
    logits: Option<NextLogits>,
    sampler: Sampler,
    answer: Vec<u32>,
    /// Answer tokens resident in the session (the rest are fed at the next steps).
    fed: usize,
    /// Steers sampling (tool calls).
    guide: Option<Box<dyn Guide>>,
    /// Counts the thought and steers its end.
    thought: Option<ThoughtBudget>,
    /// Waiting for tool responses.
    paused: bool,
    tool_calls: usize,
    tool_tokens: usize,
    cancelled: bool,
    /// The hand-over went to the front end: the turn ends at it.
    handed_back: bool,
    end: Option<TurnEnd>,
    all_logits: Option<Vec<f32>>,
    clock: TurnClock,
    /// The turn ended with its prompt in the session: snapshot the end at the next step.
    snapshot_end: bool,
    /// The prompt's images, by position.
    images: Vec<MediaSpan>,
    /// Speculative decoding, when it runs.
    spec: Option<Speculator>,
    /// Steps a check produced, told one per [`Turn::step`].
    queued: VecDeque<Step>,
}

impl Turn {
    /// Starts a turn answering `prompt` in `session`: refuses a prompt with no room for an answer
    /// (the session unchanged), else makes the session's resident ids a prefix of `prompt`
    /// (see [`Session::prepare`]).
    pub fn start(session: &mut Session, prompt: Vec<u32>, opts: TurnOptions) -> Result<Self> {
        Self::start_with(session, prompt, Vec::new(), opts)
    }

    /// [`Turn::start`] for a prompt holding `images` (their soft tokens replace the embeddings
    /// of their placeholder positions; each is prefilled in one step).
    pub fn start_with(
        session: &mut Session,
        prompt: Vec<u32>,
        images: Vec<MediaSpan>,
        opts: TurnOptions,
    ) -> Result<Self> {
        let (needed, limit) = (prompt.len() + 1, opts.context);
        if needed > limit {
            return Err(Error::ContextFull { needed, limit });
        }
        let clock = TurnClock::start();
        let reuse = session.prepare_with(&prompt, &images)?;
        Ok(Self {
            reused: session.position(),
            prompt,
            reuse,
            prefilled: 0,
            logits: None,
            sampler: Sampler::new(opts.sampling.clone()),
            answer: Vec::new(),
            fed: 0,
            guide: None,
            thought: opts.thinking.clone().map(ThoughtBudget::new),
            paused: false,
            tool_calls: 0,
            tool_tokens: 0,
            cancelled: false,
            handed_back: false,
            end: None,
            all_logits: opts.prompt_logits.then(Vec::new),
            clock,
            snapshot_end: false,
            images,
            spec: Speculator::new(opts.speculation),
            queued: VecDeque::new(),
            opts,
        })
    }

    /// Steers this turn's sampling with `guide` (tool calls).
    pub fn with_guide(mut self, guide: Box<dyn Guide>) -> Self {
        self.guide = Some(guide);
        self
    }

    /// Where its prefill starts (what the session kept), and the prompt's images: those it
    /// will prefill must hold their rows before its first step (`Worker::fill_rows`).
    pub fn images_from(&mut self) -> (usize, &mut [MediaSpan]) {
        (self.reused, &mut self.images)
    }

    /// Whether the turn waits for tool responses (a cancelled one no longer does: it ends at
    /// its next step).
    pub fn paused(&self) -> bool {
        self.paused && !self.cancelled
    }

    /// Ends the wait for tools: `ids` (the responses to the hand-over's `calls` calls, as the
    /// chat template writes them) join the answer and are fed at the next steps, then decoding
    /// goes on.
    pub fn resume(&mut self, ids: &[u32], calls: usize) {
        if !self.paused {
            return;
        }
        self.paused = false;
        self.tool_calls += calls;
        self.clock.resume();
        self.answer.extend_from_slice(ids);
        self.tool_tokens += ids.len();
        if let Some(g) = self.guide.as_mut() {
            g.resumed();
        }
    }

    /// The session's position once every answer token is fed.
    pub fn end_position(&self) -> usize {
        self.prompt.len() + self.answer.len()
    }

    /// The conversation this turn answers, in ids.
    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// The answer's ids so far (an end-of-turn id is never part of it).
    pub fn answer(&self) -> &[u32] {
        &self.answer
    }

    /// How it ended, once it has.
    pub fn end(&self) -> Option<TurnEnd> {
        self.end
    }

    /// Whether the whole prompt was prefilled (the turn happened, whatever its answer).
    pub fn prompt_done(&self) -> bool {
        self.reused + self.prefilled == self.prompt.len()
    }

    /// The logits for the token after everything resident, once the turn has them (after its
    /// prefill; at its end, after the last answer token was fed).
    pub fn next_logits(&self) -> Option<&NextLogits> {
        self.logits.as_ref()
    }

    /// Takes the logits of every prefilled position, `[n, vocab]` row-major, when
    /// [`TurnOptions::prompt_logits`] asked for them.
    pub fn take_prompt_logits(&mut self) -> Option<Vec<f32>> {
        self.all_logits.take()
    }

    /// Asks the turn to end at its next step (within one chunk or decode step).
    pub fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// Prompt (and tool-response) tokens per step from now on.
    pub fn set_chunk(&mut self, chunk: usize) {
        self.opts.chunk = chunk;
    }

    /// Ends the turn at its hand-over, which the front end answers (its own tools): the answer
    /// up to `<|tool_response>` stays resident and the turn ends with [`TurnEnd::ToolCalls`].
    pub fn hand_back(&mut self) {
        if self.paused {
            self.handed_back = true;
            self.cancelled = true;
        }
    }

    /// The turn's thought tokens so far (see [`ThoughtBudget::used`]).
    pub fn thought_tokens(&self) -> usize {
        self.thought.as_ref().map_or(0, ThoughtBudget::used)
    }

    /// What the turn cost so far; right at any point, mid-prefill included.
    pub fn stats(&self) -> TurnStats {
        // Time spent waiting for tools (and for the user's approval) is no decoding time.
        let t = self.clock.times();
        TurnStats {
            reuse: self.reuse,
            reused_tokens: self.reused,
            prefilled_tokens: self.prefilled,
            prefill_tok_s: self.prefilled as f64 / t.prefill_s.max(1e-9),
            decode_tok_s: (self.answer.len() - self.tool_tokens) as f64 / t.decode_s.max(1e-9),
            ttft_s: t.ttft_s,
            generated_tokens: self.answer.len() - self.tool_tokens,
            tool_calls: self.tool_calls,
            tool_tokens: self.tool_tokens,
            thought_tokens: self.thought_tokens(),
            speculation: self.spec.as_ref().and_then(Speculator::stats),
        }
    }

    /// Runs the turn to its end: `on_token` sees each answer token and returns false to cancel.
    pub fn run(
        &mut self,
        model: &Gemma,
        session: &mut Session,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<TurnEnd> {
        loop {
            match self.step(model, session)? {
                Step::Prefill { .. } | Step::ToolToken(_) | Step::Feeding => {}
                // No one runs tools here: the hand-over ends the turn.
                Step::ToolCalls => self.cancel(),
                Step::Token(id) => {
                    if !on_token(id) {
                        self.cancel();
                    }
                }
                Step::Finished(end) => return Ok(end),
            }
        }
    }

    /// One prefill chunk or one decode step. On an error the session is left empty and dirty
    /// (see [`Session::discard`]) and the turn is over.
    pub fn step(&mut self, model: &Gemma, session: &mut Session) -> Result<Step> {
        if self.cancelled && !self.queued.is_empty() {
            self.drop_queued(model, session)?;
        }
        if let Some(step) = self.queued.pop_front() {
            return Ok(step);
        }
        let result = match self.end {
            Some(end) => Ok(Step::Finished(end)),
            None => self.advance(model, session),
        };
        if result.is_err() {
            // A check that failed midway leaves nothing to tell.
            self.queued.clear();
            self.end = Some(TurnEnd::Cancelled);
            self.clock.finish();
            self.snapshot_end = false;
        }
        if std::mem::take(&mut self.snapshot_end) {
            session.snapshot(true);
        }
        result
    }

    fn advance(&mut self, model: &Gemma, session: &mut Session) -> Result<Step> {
        if self.cancelled {
            // What was shown stays resident, so the next turn continues from it.
            while self.fed < self.answer.len() {
                self.feed_unfed(model, session)?;
            }
            let end = match self.handed_back {
                true => TurnEnd::ToolCalls,
                false => TurnEnd::Cancelled,
            };
            return Ok(self.finish(end));
        }
        if !self.prompt_done() {
            return self.prefill_chunk(model, session);
        }
        if self.paused {
            return Ok(Step::ToolCalls);
        }
        if self.answer.len() - self.fed > 1 {
            // Tool responses: a chunk per step, so that other tabs and a cancel get their turn.
            self.feed_unfed(model, session)?;
            if self.fed < self.answer.len() {
                return Ok(Step::Feeding);
            }
        }
        if let Some(drafts) = self.drafts(model, session) {
            return self.verify(model, session, drafts);
        }
        let (began, fed) = (Instant::now(), self.fed);
        self.feed_unfed(model, session)?;
        let step = self
            .next_token(None, session.position())
            .inspect_err(|_| session.discard())?;
        // A plain step's cost, to judge speculation by: one that ran the model (the first
        // answer token reads the prefill's logits).
        if let Some(s) = self.spec.as_mut().filter(|_| self.fed > fed) {
            s.plain_step(began.elapsed());
        }
        Ok(step)
    }

    fn prefill_chunk(&mut self, model: &Gemma, session: &mut Session) -> Result<Step> {
        let total = self.prompt.len() - self.reused;
        let from = self.reused + self.prefilled;
        let end = self.prompt.len();
        let mut to = (from + self.opts.chunk.max(1)).min(end);
        if self.opts.boundary_snapshot {
            if to == end && to - from > 1 {
                // The last prompt token gets a step of its own, after the snapshot.
                to -= 1;
            }
            if from == end - 1 {
                session.snapshot(false);
            }
        }
        let to = chunk_end(&self.images, model.config().hidden_size, from, to);
        let mode = match (self.all_logits.is_some(), to == end) {
            (true, _) => Logits::All,
            (false, true) => Logits::Last,
            (false, false) => Logits::None,
        };
        let out = session.feed_with(model, &self.prompt[from..to], &self.images, mode)?;
        if let (Some(all), Some(l)) = (self.all_logits.as_mut(), out.as_ref()) {
            all.extend(to_vec(l.clone())?);
        }
        self.prefilled += to - from;
        if to == end {
            let last = out.ok_or_else(|| {
                ModelError::Backend("the last prefill chunk gave no logits".into())
            })?;
            self.logits = Some(NextLogits::last_of(last));
            self.clock.prefilled();
        }
        Ok(Step::Prefill {
            done: self.prefilled,
            total,
        })
    }

    /// Feeds the answer tokens not yet resident (at most a prefill chunk of them).
    fn feed_unfed(&mut self, model: &Gemma, session: &mut Session) -> Result<()> {
        if self.fed >= self.answer.len() {
            return Ok(());
        }
        let to = (self.fed + self.opts.chunk.max(1)).min(self.answer.len());
        let out = session.feed(model, &self.answer[self.fed..to], Logits::Last)?;
        self.fed = to;
        let last = out.ok_or_else(|| ModelError::Backend("a decode step gave no logits".into()))?;
        self.logits = Some(NextLogits::last_of(last));
        Ok(())
    }

    /// Ends the answer after its first `keep` tokens, which is where a stop string began: the
    /// session is rewound past the rest. Where the sliding window has moved past that point, it
    /// goes back to the turn's boundary snapshot and feeds the kept tokens again; only without
    /// one is it marked dirty (the next turn starts over and says so).
    pub fn cut(&mut self, keep: usize, model: &Gemma, session: &mut Session) -> Result<()> {
        self.queued.clear();
        self.answer.truncate(keep);
        self.fed = self.fed.min(keep);
        self.finish(TurnEnd::StopString);
        let resident = self.prompt.len() + keep;
        if session.position() > resident {
            match session.rewind_near(resident) {
                Some(at) if at < resident => {
                    let again = [&self.prompt[..], &self.answer[..]].concat();
                    session.prefill_with(
                        model,
                        &again[at..resident],
                        &self.images,
                        self.opts.chunk,
                    )?;
                }
                Some(_) => {}
                None => session.mark_dirty(),
            }
        }
        // The job ends the turn here, without another step: the end's snapshot is taken now.
        if std::mem::take(&mut self.snapshot_end)
            && !session.is_dirty()
            && session.position() == resident
        {
            session.snapshot(true);
        }
        Ok(())
    }

    fn finish(&mut self, end: TurnEnd) -> Step {
        self.end = Some(end);
        self.clock.finish();
        self.snapshot_end = self.opts.boundary_snapshot && self.prompt_done();
        Step::Finished(end)
    }
}

fn to_vec(t: Tensor<2>) -> Result<Vec<f32>> {
    t.into_data()
        .try_to_vec::<f32>()
        .map_err(|e| ModelError::Backend(format!("cannot read logits: {e:?}")).into())
}
