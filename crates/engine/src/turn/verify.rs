//! A speculative step of a turn: the answer's last token and a draft fed in one forward, each
//! position's logits read in order and picked exactly as a plain step picks ([`Turn::next_token`]),
//! the draft kept while the picks equal it. The session is rewound past the drafted ids that
//! were not kept, so `resident == position` holds and the answer is the one plain decoding gives
//! (given the same logits: the forward of several rows computes each row as a one-row step does).
//! The steps a check produces are told one per [`Turn::step`]; a cancel drops those not told.

use std::time::Instant;

use super::{Step, Turn};
use crate::error::Result;
use crate::session::Session;
use gemma_model::error::Error as ModelError;
use gemma_model::model::{Gemma, Logits};
use gemma_model::sampling::NextLogits;

impl Turn {
    /// The draft to check at this step, when speculation runs and has one: on a model whose
    /// checks are exact ([`Gemma::checks_exact`]), after exactly one unfed answer token (the
    /// last pick), within the context and the answer's budget.
    pub(super) fn drafts(&self, model: &Gemma, session: &Session) -> Option<Vec<u32>> {
        let spec = self
            .spec
            .as_ref()
            .filter(|s| s.on() && model.checks_exact())?;
        if self.answer.len() != self.fed + 1 {
            return None;
        }
        let left = self
            .opts
            .max_new_tokens
            .saturating_sub(self.answer.len() - self.tool_tokens);
        let room = self
            .opts
            .context
            .saturating_sub(session.position() + 1)
            .min(left);
        Some(spec.draft([&self.prompt, &self.answer], room)).filter(|d| !d.is_empty())
    }

    /// Checks `drafts` after the unfed last token: one forward of both, then a pick per
    /// position until one differs from the draft (or the turn ends); the first step comes back,
    /// the others are queued.
    pub(super) fn verify(
        &mut self,
        model: &Gemma,
        session: &mut Session,
        drafts: Vec<u32>,
    ) -> Result<Step> {
        let began = Instant::now();
        let base = session.position();
        let mut ids = Vec::with_capacity(drafts.len() + 1);
        ids.push(self.answer[self.fed]);
        ids.extend_from_slice(&drafts);
        let rows = session
            .feed(model, &ids, Logits::All)?
            .ok_or_else(|| ModelError::Backend("a check gave no logits".into()))?;
        self.fed += 1;
        let (mut kept, mut tokens) = (0, 0);
        for i in 0..=drafts.len() {
            let logits = NextLogits::row_of(&rows, i);
            let step = self
                .next_token(Some(logits), base + 1 + i)
                .inspect_err(|_| session.discard())?;
            let made = matches!(step, Step::Token(_) | Step::ToolToken(_) | Step::ToolCalls);
            tokens += usize::from(made);
            let same = match step {
                Step::Token(id) | Step::ToolToken(id) => drafts.get(i) == Some(&id),
                _ => false,
            };
            self.queued.push_back(step);
            if !same {
                break;
            }
            kept += 1;
            self.fed += 1;
        }
        self.settle(model, session, base + 1 + kept)?;
        if let Some(s) = self.spec.as_mut() {
            s.checked(drafts.len(), kept, tokens, began.elapsed());
        }
        self.queued
            .pop_front()
            .ok_or_else(|| ModelError::Backend("a check picked nothing".into()).into())
    }

    /// Rewinds the session to `resident` ids (past drafted ids not kept). Where the sliding
    /// window cannot go back that far, it goes back to a snapshot and feeds the rest again; only
    /// without one is it marked dirty (the next turn starts over and says so).
    fn settle(&mut self, model: &Gemma, session: &mut Session, resident: usize) -> Result<()> {
        if session.position() <= resident {
            return Ok(());
        }
        match session.rewind_near(resident) {
            Some(at) if at < resident => {
                let again = [&self.prompt[..], &self.answer[..]].concat();
                let ids = &again[at..resident];
                session.prefill_with(model, ids, &self.images, self.opts.chunk)?;
            }
            Some(_) => {}
            None => session.mark_dirty(),
        }
        Ok(())
    }

    /// A cancel with checked steps not yet told: their tokens leave the answer (and the session),
    /// so that what stays is what was shown.
    pub(super) fn drop_queued(&mut self, model: &Gemma, session: &mut Session) -> Result<()> {
        for step in std::mem::take(&mut self.queued) {
            match step {
                Step::Token(_) | Step::ToolToken(_) => {
                    self.answer.pop();
                }
                Step::ToolCalls => {
                    self.answer.pop();
                    self.paused = false;
                }
                Step::Finished(_) => self.end = None,
                Step::Prefill { .. } | Step::Feeding => {}
            }
        }
        self.fed = self.fed.min(self.answer.len());
        self.snapshot_end = false;
        self.settle(model, session, self.prompt.len() + self.fed)
    }
}
