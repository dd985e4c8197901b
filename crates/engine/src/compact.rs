//! Planning a shorter conversation when a tab's context fills up: when a prompt is too long
//! ([`overflows`]), which of the oldest exchanges a summary replaces and which newest ones stay
//! ([`plan_compact`]), or how many of the oldest a slide drops ([`plan_slide`]). Pure arithmetic
//! on the exchanges' token spans; the engine thread runs the plan (`worker/compact.rs`).

/// The share of `at × context` a compacted or slid conversation aims for (the next message
/// included), so that the turns after it have room before the next compaction.
const TARGET_SHARE: f64 = 0.5;

/// A conversation's sizes in tokens.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sizes {
    /// BOS and the header.
    pub base: usize,
    /// Where each exchange ends, counted from the first (after the header).
    pub ends: Vec<usize>,
    /// What the next message adds (its turn and the model's generation prompt; 0 for none).
    pub next: usize,
    /// The context limit.
    pub context: usize,
    /// The share of the context a prompt may fill.
    pub at: f64,
}

impl Sizes {
    fn start(&self, i: usize) -> usize {
        if i == 0 { 0 } else { self.ends[i - 1] }
    }

    /// Tokens of exchanges `from..to`.
    pub(crate) fn span(&self, from: usize, to: usize) -> usize {
        if from >= to {
            0
        } else {
            self.ends[to - 1] - self.start(from)
        }
    }

    fn target(&self) -> usize {
        (self.at * self.context as f64 * TARGET_SHARE) as usize
    }
}

/// Whether a prompt of `len` tokens passes the share `at` of `context` (or leaves no room for an
/// answer token at all).
pub(crate) fn overflows(len: usize, context: usize, at: f64) -> bool {
    len + 1 > context || len as f64 > at * context as f64
}

/// Most tokens a summary may take: an eighth of the context, between 32 and 1,024.
pub(crate) fn summary_tokens(context: usize) -> usize {
    (context / 8).clamp(32, 1024)
}

/// The fewest a summary's turn leaves it (a quarter of [`summary_tokens`]): the summary's turn
/// covers the resident exchanges, warm, whenever this much room is left after them.
pub(crate) fn least_summary_tokens(context: usize) -> usize {
    summary_tokens(context) / 4
}

/// Which exchanges a compaction summarizes and which it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The first exchange the summary covers; the ones before it are dropped (too long for the
    /// summary's own turn).
    pub from: usize,
    /// The first exchange kept as it is; `from == keep_from`: nothing to summarize.
    pub keep_from: usize,
}

/// The compaction of `s` whose summary turn asks with `ask` tokens and answers in at most
/// [`summary_tokens`]: the newest exchanges that fit the target stay (never all of them),
/// the rest are summarized, from the oldest that fits the summary's turn with at least
/// [`least_summary_tokens`] for the summary. `None` when the
/// next message does not fit even after a compaction, or there is nothing to summarize.
pub(crate) fn plan_compact(s: &Sizes, ask: usize) -> Option<Plan> {
    let n = s.ends.len();
    if n == 0 {
        return None;
    }
    let reserve = ask + summary_tokens(s.context);
    let fixed = s.base + reserve + s.next;
    if fixed + 1 > s.context {
        return None;
    }
    let kept = (0..n)
        .take_while(|&k| fixed + s.span(n - k, n) <= s.target())
        .last()
        .unwrap_or(0);
    let keep_from = n - kept;
    // The summary's turn holds the exchanges it covers, the request and the summary (shorter
    // than the reserve, rather than a turn that drops the oldest and prefills the rest again).
    let least = ask + least_summary_tokens(s.context);
    let from = (0..keep_from)
        .find(|&f| s.base + s.span(f, keep_from) + least <= s.context)
        .unwrap_or(keep_from);
    Some(Plan { from, keep_from })
}

/// How many of the oldest exchanges a slide drops: the fewest that bring the rest and the next
/// message to the target (all of them when none does). `None` when the next message does not
/// fit even alone.
pub(crate) fn plan_slide(s: &Sizes) -> Option<usize> {
    let n = s.ends.len();
    if s.base + s.next + 1 > s.context {
        return None;
    }
    let fits = |d: usize| s.base + s.span(d, n) + s.next <= s.target();
    Some((1..=n).find(|&d| fits(d)).unwrap_or(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten exchanges of 100 tokens after a 20-token header, in a 2,048-token context.
    fn sizes(next: usize) -> Sizes {
        Sizes {
            base: 20,
            ends: (1..=10).map(|i| i * 100).collect(),
            next,
            context: 2048,
            at: 0.9,
        }
    }

    #[test]
    fn a_prompt_overflows_past_its_share_or_without_room_for_an_answer() {
        assert!(!overflows(900, 1000, 0.9));
        assert!(overflows(901, 1000, 0.9));
        assert!(overflows(1000, 1000, 1.0));
        assert!(!overflows(999, 1000, 1.0));
    }

    #[test]
    fn compaction_keeps_the_newest_exchanges_that_fit_the_target() {
        // Target 921: 20 + 40 + 256 + 50 = 366 fixed, so five exchanges (500) fit, six do not.
        let p = plan_compact(&sizes(50), 40).expect("a plan");
        assert_eq!(
            p,
            Plan {
                from: 0,
                keep_from: 5
            }
        );
        let s = sizes(50);
        assert!(s.base + 40 + summary_tokens(s.context) + s.next + s.span(5, 10) <= s.target());
    }

    #[test]
    fn compaction_never_keeps_everything_and_drops_what_the_summary_cannot_hold() {
        let mut s = sizes(0);
        s.ends = vec![2000];
        assert_eq!(
            plan_compact(&s, 10),
            Some(Plan {
                from: 1,
                keep_from: 1
            })
        );
        s.ends = vec![10, 20];
        assert_eq!(
            plan_compact(&s, 10),
            Some(Plan {
                from: 0,
                keep_from: 1
            })
        );
        // Nine short exchanges and a long last one (kept out): the summary's turn holds the
        // newest that fit with the request and the summary.
        s.ends = (1..=9).map(|i| i * 100).chain([2000]).collect();
        let p = plan_compact(&s, 10).expect("a plan");
        assert!(p.from > 0 && p.from < p.keep_from);
        assert!(s.base + s.span(p.from, p.keep_from) + 10 + 64 <= s.context);
        assert!(s.base + s.span(p.from - 1, p.keep_from) + 10 + 64 > s.context);
    }

    #[test]
    fn nothing_is_planned_for_an_empty_chat_or_a_message_too_long_for_any_plan() {
        let mut s = sizes(0);
        s.ends.clear();
        assert_eq!(plan_compact(&s, 10), None);
        assert_eq!(plan_compact(&sizes(1800), 10), None);
        assert_eq!(plan_slide(&sizes(2040)), None);
    }

    #[test]
    fn a_slide_drops_the_fewest_oldest_exchanges() {
        // Target 921: 20 + 50 + 100·k ≤ 921 keeps eight exchanges at most.
        assert_eq!(plan_slide(&sizes(50)), Some(2));
        assert_eq!(plan_slide(&sizes(1500)), Some(10));
    }
}
