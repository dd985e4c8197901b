//! Speculative decoding's side of a turn that is not the model: where drafts come from (prompt
//! lookup over the conversation's ids, [`lookup`]) and how many to check next ([`Speculator`]:
//! the draft length follows the acceptance seen, and speculation switches itself off for the
//! turn when its steps give fewer tokens a second than plain steps). Checking a draft is the
//! turn's business (`turn/verify.rs`): each drafted position is picked exactly as plain decoding
//! picks it, so the answer is the same tokens.

use std::time::Duration;

use super::protocol::{SpecStats, Speculation};

/// The longest n-gram looked for; shorter ones are tried down to [`MIN_NGRAM`].
const MAX_NGRAM: usize = 4;
/// The shortest n-gram that proposes a draft: a single id matches too often on prose.
const MIN_NGRAM: usize = 2;
/// Checking steps before speculation's speed is judged against plain steps'.
const JUDGE_AFTER: usize = 4;
/// How much faster a token of the checks must come than a plain step's for speculation to go
/// on: where it is no clear gain (the CPU's row kernels cost about the same per row in a check
/// as in a step of one) it stops, so that it never loses.
const MARGIN: f64 = 1.1;

/// Up to `max` ids that followed the latest earlier occurrence of the last `n` ids of the
/// conversation `ids` (its prompt, then its answer so far: read in place, not joined, since a
/// decode step asks), the longest `n` from [`MAX_NGRAM`] down to [`MIN_NGRAM`] that occurs
/// earlier; empty when none does. What llama.cpp's `ngram-simple` drafts: copy-heavy answers
/// (code edited, text quoted) continue what the conversation already holds.
pub fn lookup(ids: [&[u32]; 2], max: usize) -> Vec<u32> {
    let [head, rest] = ids;
    let len = head.len() + rest.len();
    let at = |i: usize| match i.checked_sub(head.len()) {
        None => head[i],
        Some(j) => rest[j],
    };
    if max == 0 {
        return Vec::new();
    }
    for n in (MIN_NGRAM..=MAX_NGRAM).rev() {
        if len <= n {
            continue;
        }
        // The latest match that has at least one id after it (the tail itself excluded).
        let same = |s: usize| (0..n).all(|k| at(s + k) == at(len - n + k));
        if let Some(s) = (0..len - n).rev().find(|&s| same(s)) {
            let from = s + n;
            return (from..(from + max).min(len)).map(at).collect();
        }
    }
    Vec::new()
}

/// A turn's speculation: how long the next draft may be, what the checks gave, and whether it
/// still pays.
#[derive(Debug, Clone)]
pub struct Speculator {
    max: usize,
    len: usize,
    stats: SpecStats,
    /// Time and tokens of the plain steps and of the checking steps.
    plain: (Duration, usize),
    checked: (Duration, usize),
}

impl Speculator {
    /// For a turn with `settings` (`None` when it is off).
    pub fn new(settings: Speculation) -> Option<Self> {
        if settings.kind == super::protocol::Speculate::Off {
            return None;
        }
        let max = settings.draft_max.clamp(1, Speculation::MAX_DRAFT);
        Some(Self {
            max,
            len: max,
            stats: SpecStats::default(),
            plain: (Duration::ZERO, 0),
            checked: (Duration::ZERO, 0),
        })
    }

    /// Whether it still runs this turn.
    pub fn on(&self) -> bool {
        !self.stats.off
    }

    /// The draft for what follows `ids` (the conversation's prompt and its answer so far), at
    /// most `room` ids; empty when there is none or speculation is off.
    pub fn draft(&self, ids: [&[u32]; 2], room: usize) -> Vec<u32> {
        // Off, or due to be judged with no plain step to judge by: a plain step it is.
        if self.stats.off || (self.stats.steps >= JUDGE_AFTER && self.plain.1 == 0) {
            return Vec::new();
        }
        lookup(ids, self.len.min(room))
    }

    /// A plain step took `took`.
    pub fn plain_step(&mut self, took: Duration) {
        self.plain.0 += took;
        self.plain.1 += 1;
        self.judge();
    }

    /// Once enough checks ran, stops speculation for the turn unless its tokens come clearly
    /// faster than plain steps'.
    fn judge(&mut self) {
        if self.stats.steps < JUDGE_AFTER || self.plain.1 == 0 {
            return;
        }
        let per_token = |(t, n): (Duration, usize)| t.as_secs_f64() / n.max(1) as f64;
        if per_token(self.checked) * MARGIN > per_token(self.plain) {
            self.stats.off = true;
        }
    }

    /// A check of `drafted` ids kept `accepted` of them and gave `tokens` answer tokens in
    /// `took`: the next draft is longer after a full acceptance, just past the accepted ones
    /// after a miss; once judged slower than plain steps, speculation stops for the turn.
    pub fn checked(&mut self, drafted: usize, accepted: usize, tokens: usize, took: Duration) {
        let s = &mut self.stats;
        s.drafted += drafted;
        s.accepted += accepted;
        s.steps += 1;
        s.tokens += tokens;
        self.checked.0 += took;
        self.checked.1 += tokens;
        self.len = if accepted == drafted {
            (self.len * 2).min(self.max)
        } else {
            (accepted + 1).clamp(1, self.max)
        };
        self.judge();
    }

    /// What it did, for the turn's stats (`None` when nothing was checked).
    pub fn stats(&self) -> Option<SpecStats> {
        (self.stats.steps > 0 || self.stats.off).then_some(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Speculate;

    #[test]
    fn lookup_continues_the_latest_match_of_the_longest_tail() {
        // "1 2 3 4 5 9 … 2 3 4 6 7 … 2 3 4": the latest "2 3 4" is followed by "6 7".
        let ids = [1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 8, 2, 3, 4];
        // Wherever the prompt ends and the answer starts, the same draft.
        for cut in 0..=ids.len() {
            let (p, a) = ids.split_at(cut);
            assert_eq!(lookup([p, a], 2), vec![6, 7], "{cut}");
            assert_eq!(lookup([p, a], 10), vec![6, 7, 8, 2, 3, 4], "{cut}");
            assert!(lookup([p, a], 0).is_empty());
        }
        // Only a single id matches: no draft.
        assert!(lookup([&[1, 2, 3], &[9, 3]], 4).is_empty());
        assert!(lookup([&[5, 5], &[]], 4).is_empty());
    }

    #[test]
    fn the_draft_follows_acceptance_and_a_slow_speculation_stops() {
        let mut s = Speculator::new(Speculation {
            kind: Speculate::Lookup,
            draft_max: 8,
        })
        .expect("on");
        let ids: [&[u32]; 2] = [&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], &[1, 2]];
        assert_eq!(s.draft(ids, 100).len(), 8);
        assert_eq!(s.draft(ids, 3).len(), 3);
        s.checked(8, 1, 2, Duration::from_millis(10));
        assert_eq!(s.draft(ids, 100).len(), 2);
        s.checked(2, 2, 3, Duration::from_millis(10));
        assert_eq!(s.draft(ids, 100).len(), 4);
        // Plain steps of 1 ms a token against checks of ~4 ms a token: off.
        s.plain_step(Duration::from_millis(1));
        s.checked(4, 0, 1, Duration::from_millis(10));
        assert!(s.on());
        s.checked(1, 0, 1, Duration::from_millis(10));
        assert!(!s.on());
        assert!(s.draft(ids, 100).is_empty());
        let stats = s.stats().expect("ran");
        assert_eq!(
            (stats.drafted, stats.accepted, stats.steps, stats.tokens),
            (15, 3, 4, 7)
        );
        assert!(stats.off);
        assert!(
            Speculator::new(Speculation::default()).is_none(),
            "off by default"
        );
    }
}
