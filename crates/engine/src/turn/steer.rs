//! What a turn is told before it starts ([`TurnOptions`]: sampling, limits, snapshots, the
//! thought budget) and what steers it token by token while it runs (a [`Guide`]'s [`Mask`] over
//! the next token, and what the chosen one was: [`Guided`]).

use crate::budget::ThoughtLimit;
use crate::protocol::Speculation;
use gemma_model::sampling::SamplingParams;

/// How a turn runs.
#[derive(Debug, Clone)]
pub struct TurnOptions {
    /// Sampling for the answer.
    pub sampling: SamplingParams,
    /// Most answer tokens.
    pub max_new_tokens: usize,
    /// Ids that end the answer (never resident: the next turn's template closes the turn).
    pub end_ids: Vec<u32>,
    /// The context limit in tokens (prompt and answer).
    pub context: usize,
    /// Prompt tokens per prefill step.
    pub chunk: usize,
    /// Snapshot the sliding-window state one token before the end of the prompt (a user-turn
    /// boundary: regenerate rewinds there), prefilling that last token on its own, and again at
    /// the end of the answer (an edit of the next message rewinds there).
    pub boundary_snapshot: bool,
    /// Keep the logits of every prefilled position (`generate --dump-logits`).
    pub prompt_logits: bool,
    /// The thought budget and the vocabulary's thought ids (`None`: the model has no thought
    /// channel, or the caller does not count thoughts).
    pub thinking: Option<ThoughtLimit>,
    /// Tests only: ids chosen at these answer positions in place of a sample, over the guide's
    /// mask and the budget's ban (e.g. the thought channel opened on a tiny model that never
    /// opens it); a close the thought budget forces still comes first.
    #[doc(hidden)]
    pub forced: Vec<(usize, u32)>,
    /// Speculative decoding (off unless asked).
    pub speculation: Speculation,
}

impl TurnOptions {
    /// Greedy, `max_new_tokens` answer tokens with no end ids, within `context`: the options of
    /// benchmarks and tests.
    pub fn greedy(max_new_tokens: usize, context: usize) -> Self {
        Self {
            sampling: SamplingParams::greedy(),
            max_new_tokens,
            end_ids: Vec::new(),
            context,
            chunk: 128,
            boundary_snapshot: false,
            prompt_logits: false,
            thinking: None,
            forced: Vec::new(),
            speculation: Speculation::default(),
        }
    }
}

/// Steers a turn's sampling token by token: what may come next, and what a chosen token means
/// (the tool-call grammar lives behind it).
pub trait Guide: std::fmt::Debug + Send {
    /// What the next token may be, with `room` tokens left in the context.
    fn mask(&mut self, room: usize) -> Mask;
    /// `id` was chosen.
    fn chosen(&mut self, id: u32) -> Guided;
    /// The turn resumes after its tools' responses.
    fn resumed(&mut self) {}
    /// A call is being written or must be handed over: the answer's length limit waits for it
    /// (a call has a budget of its own).
    fn in_call(&self) -> bool {
        false
    }
}

/// The tokens a step may choose from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// Any.
    Any,
    /// Only these.
    Only(Vec<u32>),
    /// Any but these.
    Not(Vec<u32>),
}

/// What a chosen token was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guided {
    /// Answer text (or an end id).
    Text,
    /// Part of a tool call.
    Tool,
    /// The hand-over to the tools: the turn pauses.
    Pause,
}
