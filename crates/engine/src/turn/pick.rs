//! How a turn picks its next token from one position's logits, the same for a plain step and
//! for each position a speculative check reads: the length and context limits first, then the
//! guide's mask and the thought budget's nudge over the sampler, then what the pick means (an
//! end of turn, a tool call's token, a hand-over to the tools).

use super::{Guided, Mask, Step, Turn};
use crate::budget::Nudge;
use crate::error::Result;
use crate::protocol::TurnEnd;
use gemma_model::error::Error as ModelError;
use gemma_model::sampling::NextLogits;

impl Turn {
    /// The step that picks the token after `position` resident ids from `logits` (`None`: the
    /// turn's own, from its last forward): the answer's end when a limit is reached (the logits
    /// then stay the turn's, [`Turn::next_logits`]), else the token chosen, joined to the answer
    /// (not fed).
    pub(super) fn next_token(
        &mut self,
        logits: Option<NextLogits>,
        position: usize,
    ) -> Result<Step> {
        if logits.is_some() {
            self.logits = logits;
        }
        let in_call = self.guide.as_ref().is_some_and(|g| g.in_call());
        if !in_call && self.answer.len() - self.tool_tokens >= self.opts.max_new_tokens {
            return Ok(self.finish(TurnEnd::Length));
        }
        if position >= self.opts.context {
            return Ok(self.finish(TurnEnd::ContextFull));
        }
        let logits = self
            .logits
            .take()
            .ok_or_else(|| ModelError::Backend("no logits to sample from".into()))?;
        let room = self.opts.context.saturating_sub(position);
        let id = self.choose(logits, room)?;
        if self.answer.is_empty() {
            self.clock.first_token();
        }
        let guided = self.guide.as_mut().map_or(Guided::Text, |g| g.chosen(id));
        if let Some(t) = self.thought.as_mut() {
            t.chosen(id, guided != Guided::Text);
        }
        match guided {
            Guided::Text if self.opts.end_ids.contains(&id) => {
                return Ok(self.finish(TurnEnd::EndOfTurn(id)));
            }
            Guided::Text | Guided::Tool => {}
            Guided::Pause => {
                self.answer.push(id);
                self.paused = true;
                self.clock.pause();
                return Ok(Step::ToolCalls);
            }
        }
        self.answer.push(id);
        Ok(match guided {
            Guided::Tool => Step::ToolToken(id),
            _ => Step::Token(id),
        })
    }

    /// The next token from `logits`, within the guide's mask and the thought budget's nudge: a
    /// forced close wins outside a tool call (inside one the budget asks nothing); banned ids
    /// and the bias are applied where the logits are (a pick reads back no more than without
    /// them); a list of allowed ids reads the row.
    fn choose(&mut self, logits: NextLogits, room: usize) -> Result<u32> {
        let in_call = self.guide.as_ref().is_some_and(|g| g.in_call());
        let nudge = self
            .thought
            .as_mut()
            .map_or(Nudge::None, |t| t.nudge(in_call));
        if let Nudge::Force(id) = nudge {
            return Ok(id);
        }
        let at = self.answer.len();
        if let Some(&(_, id)) = self.opts.forced.iter().find(|(p, _)| *p == at) {
            return Ok(id);
        }
        let mask = self.guide.as_mut().map_or(Mask::Any, |g| g.mask(room));
        let (logits, banned) = match nudge {
            Nudge::Force(id) => return Ok(id),
            Nudge::Bias(id, delta) => (logits.biased(id, delta), None),
            Nudge::Ban(id) => (logits, Some(id)),
            Nudge::None => (logits, None),
        };
        match mask {
            Mask::Any => Ok(self.sampler.pick(logits.without(banned.as_slice()))?),
            Mask::Not(mut ids) => {
                ids.extend(banned);
                Ok(self.sampler.pick(logits.without(&ids))?)
            }
            Mask::Only(ids) if ids.len() == 1 => Ok(ids[0]),
            Mask::Only(ids) => {
                let v = logits.without(banned.as_slice()).to_vec()?;
                let mut kept = vec![f32::NEG_INFINITY; v.len()];
                for id in ids.into_iter().map(|i| i as usize).filter(|&i| i < v.len()) {
                    kept[id] = v[id];
                }
                Ok(self.sampler.sample(&kept))
            }
        }
    }
}
