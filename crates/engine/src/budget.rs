//! The per-turn thought budget ([`ThoughtBudget`]): counts a turn's thought tokens over all its
//! thought blocks (never re-armed per block) and steers the end of the thought, in ids: from 85%
//! of the budget a bias on `<channel|>` that rises linearly to [`MAX_BIAS`] logits at 100%; at
//! 100% the close is forced once the last thought token ends a line (or [`LINE_GRACE`] tokens
//! later), after the configured message; never inside a tool call. Once spent, `<|channel>` is
//! banned for the rest of the turn. The turn loop applies what it says ([`Nudge`]); the forced
//! ids are sampled tokens like any other, so the text side never knows the difference.

use std::sync::Arc;

use super::thinking::Channels;
use gemma_model::tokenizer::Tokenizer;

/// Where the bias on the close starts, as a share of the budget.
pub const SOFT_SHARE: f32 = 0.85;
/// The bias on the close at 100% of the budget, in logits (it rises linearly from 0 at
/// [`SOFT_SHARE`]).
pub const MAX_BIAS: f32 = 8.0;
/// Thought tokens past the budget that wait for a line end; then the close is forced anyway.
pub const LINE_GRACE: usize = 64;

/// What the engine knows of thoughts for its vocabulary, worked out once: the channel ids, the
/// ids whose text ends a line, and the closing message in ids.
#[derive(Clone, PartialEq, Eq)]
pub struct ThoughtVocab {
    /// The channel markers.
    pub channels: Channels,
    /// Ids whose text ends with `\n`, sorted.
    line_ends: Vec<u32>,
    /// Written before a forced close: plain text, never a control token.
    message: Vec<u32>,
}

impl std::fmt::Debug for ThoughtVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThoughtVocab")
            .field("channels", &self.channels)
            .field("line_ends", &self.line_ends.len())
            .field("message", &self.message)
            .finish()
    }
}

impl ThoughtVocab {
    /// The vocabulary of `tok` with `channels`; `message` (blank: none) is written before a
    /// forced close, spelled in plain text where the tokenizer would match a control token.
    pub fn new(tok: &Tokenizer, channels: Channels, message: Option<&str>) -> Self {
        let bytes = tok.vocab_bytes();
        let line_ends = (0..bytes.len() as u32)
            .filter(|&id| {
                bytes[id as usize]
                    .as_ref()
                    .is_some_and(|b| b.ends_with(b"\n"))
            })
            .collect();
        let message = message
            .filter(|m| !m.trim().is_empty())
            .map(|m| plain(tok, &bytes, m))
            .unwrap_or_default();
        Self::from_parts(channels, line_ends, message)
    }

    /// From its parts: `line_ends` in any order, `message` as is.
    pub fn from_parts(channels: Channels, mut line_ends: Vec<u32>, message: Vec<u32>) -> Self {
        line_ends.sort_unstable();
        Self {
            channels,
            line_ends,
            message,
        }
    }

    /// Whether `id`'s text ends a line.
    pub fn ends_line(&self, id: u32) -> bool {
        self.line_ends.binary_search(&id).is_ok()
    }

    /// The ids written at a forced close: the message, then `<channel|>`.
    fn closing(&self, k: usize) -> Option<u32> {
        match k.cmp(&self.message.len()) {
            std::cmp::Ordering::Less => Some(self.message[k]),
            std::cmp::Ordering::Equal => Some(self.channels.close),
            std::cmp::Ordering::Greater => None,
        }
    }
}

/// `text` in ids without control tokens: where the tokenizer matched one, its text is spelled
/// in byte tokens (dropped where the vocabulary has none).
fn plain(tok: &Tokenizer, bytes: &[Option<Vec<u8>>], text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for id in tok.encode(text).unwrap_or_default() {
        if bytes.get(id as usize).is_some_and(Option::is_some) {
            out.push(id);
            continue;
        }
        let piece = tok.token(id).unwrap_or_default();
        out.extend(tok.byte_tokens(&piece));
    }
    out
}

/// A turn's thought settings: its budget and the vocabulary's thought ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThoughtLimit {
    /// Most thought tokens in the turn, over all its blocks (`None`: unbounded, counted only;
    /// 0: no thought at all).
    pub budget: Option<usize>,
    /// The vocabulary's thought ids.
    pub vocab: Arc<ThoughtVocab>,
}

/// What the budget asks of the next token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nudge {
    /// Nothing.
    None,
    /// Add this many logits to this id.
    Bias(u32, f32),
    /// Never this id.
    Ban(u32),
    /// This id, without sampling.
    Force(u32),
}

/// One turn's thought count and where its thought stands.
#[derive(Debug, Clone)]
pub struct ThoughtBudget {
    limit: ThoughtLimit,
    /// Thought tokens so far, every block of the turn.
    used: usize,
    /// Inside a thought channel.
    inside: bool,
    /// The last thought token ended a line (or the block has just opened).
    line_end: bool,
    /// How many ids of the forced close were written, while one is under way.
    closing: Option<usize>,
}

impl ThoughtBudget {
    /// A turn's budget, nothing thought yet.
    pub fn new(limit: ThoughtLimit) -> Self {
        Self {
            limit,
            used: 0,
            inside: false,
            line_end: true,
            closing: None,
        }
    }

    /// The turn's thought tokens so far: the tokens inside a thought channel (its name line and
    /// the closing message included), the channel markers and tool-call tokens not.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Whether the turn is inside a thought.
    pub fn inside(&self) -> bool {
        self.inside
    }

    /// What the next token must be or how it is weighed; `in_call`: a tool call is being
    /// written (the call's guide decides then, and the close waits for it).
    pub fn nudge(&mut self, in_call: bool) -> Nudge {
        let Some(budget) = self.limit.budget else {
            return Nudge::None;
        };
        let ch = self.limit.vocab.channels;
        if !self.inside {
            // Spent: no new thought this turn.
            return if self.used >= budget {
                Nudge::Ban(ch.open)
            } else {
                Nudge::None
            };
        }
        if in_call {
            self.closing = None;
            return Nudge::None;
        }
        if let Some(id) = self.closing.and_then(|k| self.limit.vocab.closing(k)) {
            return Nudge::Force(id);
        }
        if self.used >= budget && (self.line_end || self.used >= budget + LINE_GRACE) {
            self.closing = Some(0);
            let first = self.limit.vocab.closing(0).unwrap_or(ch.close);
            return Nudge::Force(first);
        }
        match bias(self.used, budget) {
            Some(delta) => Nudge::Bias(ch.close, delta),
            None => Nudge::None,
        }
    }

    /// `id` was chosen (`tool`: as part of a tool call).
    pub fn chosen(&mut self, id: u32, tool: bool) {
        let ch = self.limit.vocab.channels;
        if id == ch.open || id == ch.close {
            self.inside = id == ch.open;
            self.line_end = true;
            self.closing = None;
            return;
        }
        if !self.inside || tool {
            return;
        }
        self.used += 1;
        self.line_end = self.limit.vocab.ends_line(id);
        // A forced close goes on only while its ids are the ones chosen.
        self.closing = match self.closing {
            Some(k) if self.limit.vocab.closing(k) == Some(id) => Some(k + 1),
            _ => None,
        };
    }
}

/// The bias on the close with `used` of `budget` thought tokens spent: none below
/// [`SOFT_SHARE`], then rising linearly to [`MAX_BIAS`] at the budget, and kept there.
pub fn bias(used: usize, budget: usize) -> Option<f32> {
    let soft = budget as f32 * SOFT_SHARE;
    let used = used as f32;
    if used <= soft {
        return None;
    }
    let ramp = ((used - soft) / (budget as f32 - soft).max(f32::EPSILON)).min(1.0);
    Some(MAX_BIAS * ramp)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: Channels = Channels {
        open: 100,
        close: 101,
    };
    /// A token whose text ends a line.
    const NL: u32 = 7;
    /// A word.
    const W: u32 = 5;

    fn budget(tokens: Option<usize>, message: Vec<u32>) -> ThoughtBudget {
        let vocab = ThoughtVocab::from_parts(CH, vec![NL, 9], message);
        ThoughtBudget::new(ThoughtLimit {
            budget: tokens,
            vocab: Arc::new(vocab),
        })
    }

    /// Plays the turn: each step takes what the budget forces, else `next()`; returns the ids.
    fn play(b: &mut ThoughtBudget, steps: usize, next: &mut dyn FnMut(usize) -> u32) -> Vec<u32> {
        let mut out = Vec::new();
        for i in 0..steps {
            let id = match b.nudge(false) {
                Nudge::Force(id) => id,
                Nudge::Ban(banned) => Some(next(i)).filter(|&id| id != banned).unwrap_or(W),
                _ => next(i),
            };
            b.chosen(id, false);
            out.push(id);
        }
        out
    }

    #[test]
    fn the_bias_rises_from_85_percent_to_the_full_bias_at_the_budget() {
        assert_eq!(bias(85, 100), None);
        let mid = bias(92, 100).expect("biased");
        assert!(mid > 0.0 && mid < MAX_BIAS, "{mid}");
        assert!(bias(96, 100).expect("biased") > mid);
        assert_eq!(bias(100, 100), Some(MAX_BIAS));
        assert_eq!(bias(140, 100), Some(MAX_BIAS));
        assert_eq!(bias(0, 0), None);
    }

    #[test]
    fn the_close_waits_for_a_line_end_then_is_one_forced_close() {
        let mut b = budget(Some(10), Vec::new());
        // Open, then words; a line ends at the 12th thought token.
        let ids = play(&mut b, 20, &mut |i| match i {
            0 => 100,
            12 => NL,
            _ => W,
        });
        assert_eq!(ids[13], 101, "closed right after the line end: {ids:?}");
        assert_eq!(ids.iter().filter(|&&i| i == 101).count(), 1);
        assert_eq!(b.used(), 12);
        assert!(!b.inside());
        // Spent: the answer may not open another thought.
        assert_eq!(b.nudge(false), Nudge::Ban(100));
    }

    #[test]
    fn with_no_line_end_the_close_comes_after_the_grace() {
        let mut b = budget(Some(4), Vec::new());
        let ids = play(&mut b, 4 + LINE_GRACE + 4, &mut |i| {
            if i == 0 { 100 } else { W }
        });
        let close = ids.iter().position(|&i| i == 101).expect("closed");
        assert_eq!(close, 1 + 4 + LINE_GRACE);
        assert_eq!(b.used(), 4 + LINE_GRACE);
    }

    #[test]
    fn the_message_is_written_before_the_close_and_counted() {
        let mut b = budget(Some(3), vec![40, 41, NL]);
        let ids = play(&mut b, 10, &mut |i| if i == 0 { 100 } else { NL });
        assert_eq!(ids[..8], [100, NL, NL, NL, 40, 41, NL, 101]);
        assert_eq!(b.used(), 6);
    }

    #[test]
    fn budget_zero_closes_at_once_and_bans_the_open() {
        let mut b = budget(Some(0), Vec::new());
        assert_eq!(b.nudge(false), Nudge::Ban(100), "no thought to start");
        // Opened anyway (the template, a forced id): the next id is the close.
        b.chosen(100, false);
        assert_eq!(b.nudge(false), Nudge::Force(101));
        b.chosen(101, false);
        assert_eq!(b.used(), 0);
        assert_eq!(b.nudge(false), Nudge::Ban(100));
    }

    #[test]
    fn the_budget_spans_blocks_and_is_never_re_armed() {
        let mut b = budget(Some(10), Vec::new());
        // A first block of 6 closed by the model, some answer, a second block.
        let script = [100, W, W, W, W, W, NL, 101, W, W, 100];
        let ids = play(&mut b, 30, &mut |i| script.get(i).copied().unwrap_or(NL));
        let second = &ids[10..];
        let close = second.iter().position(|&i| i == 101).expect("closed");
        // 6 thought tokens in the first block leave 4 for the second.
        assert_eq!(close, 5, "{ids:?}");
        assert_eq!(b.used(), 10);
    }

    #[test]
    fn a_tool_call_is_never_cut_and_its_tokens_are_not_thought() {
        let mut b = budget(Some(2), Vec::new());
        b.chosen(100, false);
        b.chosen(NL, false);
        b.chosen(NL, false);
        // At the budget, a line ended, but a call is being written: nothing is forced.
        assert_eq!(b.nudge(true), Nudge::None);
        b.chosen(55, true);
        assert_eq!(b.used(), 2);
        // The call ended: the close comes now.
        assert_eq!(b.nudge(false), Nudge::Force(101));
    }

    #[test]
    fn unbounded_counts_and_never_steers() {
        let mut b = budget(None, Vec::new());
        let ids = play(&mut b, 200, &mut |i| if i == 0 { 100 } else { W });
        assert!(!ids.contains(&101));
        assert_eq!(b.used(), 199);
    }

    #[test]
    fn a_forced_id_overruled_is_not_taken_for_the_close() {
        let mut b = budget(Some(1), vec![40, 41]);
        b.chosen(100, false);
        b.chosen(NL, false);
        assert_eq!(b.nudge(false), Nudge::Force(40));
        // Something else was chosen (a test hook, say): the close starts over.
        b.chosen(W, false);
        assert_eq!(b.nudge(false), Nudge::Bias(101, MAX_BIAS));
    }
}
