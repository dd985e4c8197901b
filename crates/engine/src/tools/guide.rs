//! The tool-call guide of a turn ([`CallGuide`]): outside a call it lets the model write freely
//! (or forbids, or forces, the call token, as the tab's `tool_choice` and the per-turn limit say);
//! from `<|tool_call>` to `<tool_call|>` only tokens that keep the call a well-formed call of a
//! declared tool with arguments its schema accepts; after a call, another call or the hand-over
//! (`<|tool_response>`), which pauses the turn.

use std::sync::Arc;

use gemma_tools::syntax::{CallGrammar, Matcher, Vocab};

use super::super::protocol::ToolChoice;
use super::super::turn::{Guide, Guided, Mask};
use super::ToolIds;

/// Where the guide stands.
#[derive(Debug, Clone)]
enum Phase {
    /// Answer text (or thought).
    Free,
    /// Inside a call, `tokens` sampled so far.
    Call { m: Matcher, tokens: usize },
    /// After `<tool_call|>`: another call, or the hand-over.
    Between,
}

/// Steers one turn's tool calls.
#[derive(Debug)]
pub struct CallGuide {
    grammar: Arc<CallGrammar>,
    vocab: Arc<Vocab>,
    ids: ToolIds,
    choice: ToolChoice,
    phase: Phase,
    /// Calls the turn may still make.
    calls_left: usize,
    /// Tokens one call may take before it is finished by force (the shortest completion).
    call_budget: usize,
    /// Nothing chosen since the turn started or resumed.
    fresh: bool,
}

impl CallGuide {
    /// A guide over `grammar` (the tab's declared tools), for a turn that may make `max_calls`
    /// calls of at most `call_budget` tokens each.
    pub fn new(
        grammar: Arc<CallGrammar>,
        vocab: Arc<Vocab>,
        ids: ToolIds,
        choice: ToolChoice,
        max_calls: usize,
        call_budget: usize,
    ) -> Self {
        Self {
            grammar,
            vocab,
            ids,
            choice,
            phase: Phase::Free,
            calls_left: max_calls,
            call_budget: call_budget.max(8),
            fresh: true,
        }
    }

    /// Whether a call may start now, with `room` tokens left in the context.
    fn may_call(&self, room: usize) -> bool {
        self.calls_left > 0 && self.choice != ToolChoice::None && Self::room_for_a_call(room)
    }

    /// Whether `room` tokens left in the context leave room for a call to start: a call, its
    /// response and the answer after it need more than twice the reserve.
    pub fn room_for_a_call(room: usize) -> bool {
        room > RESERVE * 2
    }

    /// Whether the call must be finished now: past its budget, or about to eat into the
    /// context's reserve (the shortest ending is measured only near it).
    fn must_finish(&self, m: &Matcher, tokens: usize, room: usize) -> bool {
        if tokens >= self.call_budget {
            return true;
        }
        room < RESERVE + NEAR_END
            && m.completion()
                .is_none_or(|rest| room <= RESERVE + rest.len())
    }
}

/// Tokens kept free at the end of the context for the calls' responses and the answer after
/// them: a call is finished by force before it eats into them, and none starts near them.
pub const RESERVE: usize = 96;
/// How near the reserve a call's shortest ending starts to be measured.
const NEAR_END: usize = 256;

impl Guide for CallGuide {
    fn mask(&mut self, room: usize) -> Mask {
        let (call, end, response) = (self.ids.call, self.ids.call_end, self.ids.response);
        match &self.phase {
            Phase::Free
                if self.fresh && self.choice == ToolChoice::Required && self.may_call(room) =>
            {
                Mask::Only(vec![call])
            }
            // Never a hand-over or a call's end outside a call.
            Phase::Free if self.may_call(room) => Mask::Not(vec![end, response]),
            Phase::Free => Mask::Not(vec![call, end, response]),
            Phase::Call { m, tokens } if self.must_finish(m, *tokens, room) => {
                Mask::Only(self.vocab.forced(m))
            }
            Phase::Call { m, .. } => Mask::Only(self.vocab.allowed(m)),
            Phase::Between if self.may_call(room) => Mask::Only(vec![call, response]),
            Phase::Between => Mask::Only(vec![response]),
        }
    }

    fn chosen(&mut self, id: u32) -> Guided {
        self.fresh = false;
        let phase = std::mem::replace(&mut self.phase, Phase::Free);
        let (next, guided) = match phase {
            Phase::Free if id == self.ids.call && self.calls_left > 0 => {
                self.calls_left -= 1;
                let m = self.grammar.matcher();
                (Phase::Call { m, tokens: 0 }, Guided::Tool)
            }
            Phase::Free => (Phase::Free, Guided::Text),
            Phase::Call { mut m, tokens } => {
                // The mask let only accepted ids through; a refused one cannot happen.
                let _ = self.vocab.feed(&mut m, id);
                if m.is_done() {
                    (Phase::Between, Guided::Tool)
                } else {
                    (
                        Phase::Call {
                            m,
                            tokens: tokens + 1,
                        },
                        Guided::Tool,
                    )
                }
            }
            Phase::Between if id == self.ids.call && self.calls_left > 0 => {
                self.calls_left -= 1;
                let m = self.grammar.matcher();
                (Phase::Call { m, tokens: 0 }, Guided::Tool)
            }
            Phase::Between => (Phase::Free, Guided::Pause),
        };
        self.phase = next;
        guided
    }

    fn resumed(&mut self) {
        self.phase = Phase::Free;
        self.fresh = false;
    }

    fn in_call(&self) -> bool {
        !matches!(self.phase, Phase::Free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context with room to spare.
    const ROOM: usize = 10_000;

    /// Ids: 0..256 the bytes, then call, call end, response, response end, quote.
    fn setup(choice: ToolChoice, max_calls: usize, budget: usize) -> CallGuide {
        let ids = ToolIds {
            call: 256,
            call_end: 257,
            response: 258,
            response_end: 259,
            quote: 260,
        };
        let mut bytes: Vec<Option<Vec<u8>>> = (0..=255u8).map(|b| Some(vec![b])).collect();
        bytes.extend([None, None, None, None, None]);
        let vocab = Vocab::new(bytes, ids.quote, ids.call_end);
        let schema = serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
        let grammar = CallGrammar::new(&[("find".into(), schema)]).expect("compiles");
        CallGuide::new(
            Arc::new(grammar),
            Arc::new(vocab),
            ids,
            choice,
            max_calls,
            budget,
        )
    }

    /// Chooses what the mask allows: `text`'s byte when allowed, else the first allowed id.
    fn pick(g: &mut CallGuide, prefer: Option<u32>) -> (u32, Guided) {
        let id = match g.mask(ROOM) {
            Mask::Only(ids) => prefer.filter(|p| ids.contains(p)).unwrap_or(ids[0]),
            Mask::Not(banned) => prefer
                .filter(|p| !banned.contains(p))
                .unwrap_or(b'x' as u32),
            Mask::Any => prefer.unwrap_or(b'x' as u32),
        };
        (id, g.chosen(id))
    }

    #[test]
    fn required_forces_a_well_formed_call_then_the_hand_over() {
        let mut g = setup(ToolChoice::Required, 8, 2048);
        assert_eq!(g.mask(ROOM), Mask::Only(vec![256]));
        assert_eq!(g.chosen(256), Guided::Tool);
        // Whatever is preferred, only the call's language gets through.
        let mut text = Vec::new();
        for &want in b"call:find{q:" {
            let (id, guided) = pick(&mut g, Some(want as u32));
            assert_eq!((id, guided), (want as u32, Guided::Tool));
            text.push(id);
        }
        assert_eq!(
            pick(&mut g, Some(b'}' as u32)).0,
            260,
            "a string opens with the quote"
        );
        assert_eq!(pick(&mut g, Some(b'a' as u32)).0, b'a' as u32);
        assert_eq!(pick(&mut g, Some(260)).0, 260);
        assert_eq!(pick(&mut g, Some(b'}' as u32)).0, b'}' as u32);
        assert_eq!(pick(&mut g, Some(257)), (257, Guided::Tool));
        // After the call: another, or the hand-over, which pauses the turn.
        assert_eq!(g.mask(ROOM), Mask::Only(vec![256, 258]));
        assert_eq!(g.chosen(258), Guided::Pause);
        g.resumed();
        assert_eq!(
            g.mask(ROOM),
            Mask::Not(vec![257, 258]),
            "free text after the responses"
        );
    }

    #[test]
    fn none_and_the_call_limit_forbid_the_call_token() {
        let mut g = setup(ToolChoice::None, 8, 2048);
        assert_eq!(g.mask(ROOM), Mask::Not(vec![256, 257, 258]));
        let mut g = setup(ToolChoice::Auto, 1, 2048);
        assert_eq!(g.mask(ROOM), Mask::Not(vec![257, 258]));
        assert_eq!(g.chosen(256), Guided::Tool);
        for &b in b"call:find{q:" {
            g.chosen(b as u32);
        }
        for id in [260, b'z' as u32, 260, b'}' as u32, 257] {
            g.chosen(id);
        }
        assert_eq!(
            g.mask(ROOM),
            Mask::Only(vec![258]),
            "no second call past the limit"
        );
    }

    #[test]
    fn a_call_past_its_budget_is_finished_by_force() {
        let mut g = setup(ToolChoice::Required, 8, 8);
        g.chosen(256);
        // The model rambles inside the string: past the budget, the shortest ending is forced.
        for &b in b"call:find{q:" {
            g.chosen(b as u32);
        }
        g.chosen(260);
        let mut steps = 0;
        loop {
            let (id, _) = pick(&mut g, Some(b'a' as u32));
            steps += 1;
            if id == 257 {
                break;
            }
            assert!(steps < 20, "the call never ends");
        }
        assert_eq!(g.mask(ROOM), Mask::Only(vec![256, 258]));
    }

    #[test]
    fn a_call_near_the_end_of_the_context_is_finished_and_none_starts_there() {
        let mut g = setup(ToolChoice::Required, 8, 2048);
        assert_eq!(
            g.mask(RESERVE),
            Mask::Not(vec![256, 257, 258]),
            "no room for a call"
        );
        assert_eq!(g.chosen(256), Guided::Tool);
        for &b in b"call:find{q:" {
            g.chosen(b as u32);
        }
        g.chosen(260);
        // Far from the end the string goes on; near it, its shortest ending is forced.
        assert!(matches!(g.mask(ROOM), Mask::Only(ids) if ids.len() > 100));
        assert_eq!(g.mask(RESERVE + 3), Mask::Only(vec![260]));
    }
}
