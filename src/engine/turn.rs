//! One running turn on the engine thread ([`Job`]): prefill in chunks, then decode a token at a
//! time, streaming answer and thought text, holding back what may become a stop string, and
//! committing the turn to the tab's conversation when it ends. A quiet job only prefills: it is
//! how the `strip` thinking policy re-prefills an answer without its thought.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use super::protocol::{Event, TabId};
use super::session::{Reuse, TurnEnd, TurnStats};
use super::stop;
use super::thinking::{self, Route, Router, ThinkingPolicy};
use super::worker::Worker;
use crate::error::{Error, Result};
use crate::sampling::{NextLogits, Sampler};
use crate::tokenizer::stream::TextStream;

/// Prompt tokens per prefill step.
pub(super) const CHUNK: usize = 128;

/// A turn in progress.
pub(super) struct Job {
    /// The whole conversation this turn answers, in ids.
    pub prompt: Vec<u32>,
    /// The conversation header (after BOS) this prompt was built with.
    pub header: Vec<u32>,
    pub reuse: Reuse,
    pub reused: usize,
    pub prefilled: usize,
    pub logits: Option<NextLogits>,
    pub sampler: Sampler,
    pub router: Router,
    pub stream: TextStream,
    pub thought: TextStream,
    /// Whether the thought's channel name line is still being skipped.
    pub naming: bool,
    pub answer: Vec<u32>,
    /// Decoded answer text not shown yet (it may be the start of a stop string).
    pub pending: String,
    /// Bytes of answer text shown so far.
    pub shown: usize,
    pub started: Instant,
    pub prefill_s: f64,
    pub ttft_s: f64,
    pub stop: bool,
    /// Prefill only, silently, then end (no sampling, no events).
    pub quiet: bool,
}

impl Job {
    pub fn new(prompt: Vec<u32>, header: Vec<u32>, reuse: Reuse, reused: usize) -> Self {
        Self {
            prompt,
            header,
            reuse,
            reused,
            prefilled: 0,
            logits: None,
            sampler: Sampler::new(Default::default()),
            router: Router::default(),
            stream: TextStream::new(),
            thought: TextStream::new(),
            naming: true,
            answer: Vec::new(),
            pending: String::new(),
            shown: 0,
            started: Instant::now(),
            prefill_s: 0.0,
            ttft_s: 0.0,
            stop: false,
            quiet: false,
        }
    }
}

impl Worker<'_> {
    /// Advances the next running turn by one prefill chunk or one decode step.
    pub(super) fn step(&mut self) {
        let next = self
            .tabs
            .iter()
            .filter(|(_, t)| t.job.is_some())
            .map(|(id, _)| *id)
            .find(|id| self.last.is_none_or(|l| *id > l))
            .or_else(|| {
                self.tabs
                    .iter()
                    .find(|(_, t)| t.job.is_some())
                    .map(|(id, _)| *id)
            });
        let Some(tab) = next else { return };
        self.last = Some(tab);
        if let Err(e) = self.advance(tab) {
            let quiet = match self.tabs.get_mut(&tab) {
                Some(t) => t.job.take().is_some_and(|j| j.quiet),
                None => false,
            };
            // A failed quiet re-prefill has left the session dirty; the next turn says so.
            if !quiet {
                self.emit(Event::Failed {
                    tab,
                    error: e.to_string(),
                });
            }
        }
    }

    fn advance(&mut self, tab: TabId) -> Result<()> {
        let (model, tok) = (&self.lm.model, self.tok);
        let never = AtomicBool::new(false);
        let Some(t) = self.tabs.get_mut(&tab) else {
            return Ok(());
        };
        let (max_new, context) = (t.max_new_tokens, t.context);
        let Some(job) = t.job.as_mut() else {
            return Ok(());
        };
        if job.stop {
            return self.finish(tab, TurnEnd::Stopped);
        }
        let todo = job.prompt.len() - job.reused;
        if job.prefilled < todo {
            let from = job.reused + job.prefilled;
            let end = job.prompt.len();
            let mut to = (from + CHUNK).min(end);
            if to == end && to - from > 1 {
                // The last prompt token gets a step of its own, after a snapshot (below).
                to -= 1;
            }
            if from == end - 1 {
                // A user-turn boundary: regenerate and edits rewind here.
                t.session.snapshot();
            }
            let out =
                t.session
                    .prefill(model, &job.prompt[from..to], CHUNK, &never, &mut |_, _| {})?;
            job.prefilled += to - from;
            job.logits = out;
            if job.prefilled == todo {
                job.prefill_s = job.started.elapsed().as_secs_f64();
                if job.quiet {
                    t.job = None;
                    return Ok(());
                }
            }
            if !job.quiet {
                let event = Event::Prefill {
                    tab,
                    done: job.prefilled,
                    total: todo,
                    reused: job.reused,
                };
                let _ = self.events.send(event);
            }
            return Ok(());
        }
        if job.answer.len() >= max_new {
            return self.finish(tab, TurnEnd::Length);
        }
        if job.prompt.len() + job.answer.len() >= context {
            return self.finish(tab, TurnEnd::ContextFull);
        }
        let logits = job
            .logits
            .take()
            .ok_or_else(|| Error::Backend("no logits to sample from".into()))?;
        let id = job
            .sampler
            .pick(logits)
            .inspect_err(|_| t.session.discard())?;
        if job.answer.is_empty() {
            job.ttft_s = job.started.elapsed().as_secs_f64();
        }
        if self.stop_ids.contains(&id) {
            return self.finish(tab, TurnEnd::Stop(id));
        }
        job.answer.push(id);
        match job.router.route(id) {
            Route::Marker => {}
            Route::Thought => {
                let piece = job.thought.push(tok, id)?;
                let text = thinking::skip_channel_name(&piece, &mut job.naming);
                if !text.is_empty() {
                    let _ = self.events.send(Event::Thought { tab, text });
                }
            }
            Route::Answer => {
                let delta = job.stream.push(tok, id)?;
                job.pending.push_str(&delta);
                let (show, stop_at) = stop::scan(&job.pending, &t.stop_strings);
                if show > 0 {
                    let text: String = job.pending.drain(..show).collect();
                    job.shown += text.len();
                    let _ = self.events.send(Event::Token { tab, text });
                }
                if stop_at.is_some() {
                    return self.finish(tab, TurnEnd::StopString);
                }
            }
        }
        job.logits = t.session.prefill(model, &[id], 1, &never, &mut |_, _| {})?;
        Ok(())
    }

    pub(super) fn finish(&mut self, tab: TabId, end: TurnEnd) -> Result<()> {
        let tok = self.tok;
        let strip = self.options.thinking_policy == ThinkingPolicy::Strip;
        let channels = self.channels;
        let Some(t) = self.tabs.get_mut(&tab) else {
            return Ok(());
        };
        let Some(mut job) = t.job.take() else {
            return Ok(());
        };
        if job.quiet {
            return Ok(());
        }
        if end == TurnEnd::StopString {
            // Keep only the tokens whose answer text was shown; rewind the session past the rest.
            let shown = |ids: &[u32]| -> Result<usize> {
                let answer = match channels {
                    Some(ch) => thinking::strip(ids, ch),
                    None => ids.to_vec(),
                };
                Ok(tok.decode(&answer, true)?.len())
            };
            let mut keep = job.answer.len();
            while keep > 0 && shown(&job.answer[..keep])? > job.shown {
                keep -= 1;
            }
            job.answer.truncate(keep);
            let resident = job.prompt.len() + keep;
            if t.session.position() > resident && !t.session.rewind(resident) {
                t.session.mark_dirty();
            }
        } else {
            job.pending.push_str(&job.stream.finish(tok)?);
            if !job.pending.is_empty() {
                let text = std::mem::take(&mut job.pending);
                let _ = self.events.send(Event::Token { tab, text });
            }
        }
        let todo = job.prompt.len() - job.reused;
        let decode_s = (job.started.elapsed().as_secs_f64() - job.prefill_s).max(1e-9);
        let stats = TurnStats {
            reuse: job.reuse,
            reused_tokens: job.reused,
            prefilled_tokens: job.prefilled,
            prefill_tok_s: job.prefilled as f64 / job.prefill_s.max(1e-9),
            decode_tok_s: job.answer.len() as f64 / decode_s,
            ttft_s: job.ttft_s,
            generated_tokens: job.answer.len(),
        };
        let mut settle = None;
        if job.prefilled == todo {
            // The turn happened: commit it to the conversation (the next turn's template text
            // closes it). Under `strip`, the history holds the answer without its thought, as
            // the template renders it, and the session is re-prefilled to match in the
            // background.
            let at = job.prompt.len();
            let mut convo = std::mem::take(&mut job.prompt);
            match channels.filter(|_| strip && job.router.seen) {
                Some(ch) => {
                    convo.extend(thinking::strip(&job.answer, ch));
                    settle = Some(convo.clone());
                }
                None => convo.append(&mut job.answer),
            }
            t.convo = convo;
            t.header = job.header;
            t.last_answer = Some(at);
            let _ = self.events.send(Event::Committed {
                tab,
                ids: t.convo.clone(),
                header: t.header.len(),
                last_answer: t.last_answer,
            });
        }
        let _ = self.events.send(Event::Finished { tab, end, stats });
        if let Some(ids) = settle {
            let reuse = t.session.prepare(&ids)?;
            let reused = t.session.position();
            let mut quiet = Job::new(ids, t.header.clone(), reuse, reused);
            quiet.quiet = true;
            t.job = Some(quiet);
        }
        self.enforce_budget(tab);
        Ok(())
    }
}
