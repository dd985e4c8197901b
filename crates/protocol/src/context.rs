//! What a tab does when its conversation outgrows its context ([`Overflow`]: stop, compact into a
//! summary, or slide past the oldest exchanges), and what the engine tells the front end when it
//! did ([`Compaction`]).

/// What happens when a turn's prompt passes [`Overflow::at`] of the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverflowMode {
    /// Nothing: a prompt that does not fit is refused, an answer that reaches the limit ends
    /// there (`TurnEnd::ContextFull`).
    #[default]
    Stop,
    /// The model summarizes the older exchanges; the conversation goes on from the summary and
    /// the newest exchanges that fit.
    Compact,
    /// The oldest exchanges are dropped until the rest fits.
    Slide,
}

impl OverflowMode {
    /// Every mode, for reading names back.
    pub const ALL: [OverflowMode; 3] = [
        OverflowMode::Stop,
        OverflowMode::Compact,
        OverflowMode::Slide,
    ];

    /// The name used in the config (`context_overflow`).
    pub fn as_str(self) -> &'static str {
        match self {
            OverflowMode::Stop => "stop",
            OverflowMode::Compact => "compact",
            OverflowMode::Slide => "slide",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// The summary request a compaction sends when the config names none.
pub const DEFAULT_COMPACT_PROMPT: &str = "Summarize our conversation so far, for you to continue \
    it from this summary alone: the facts, names, numbers, decisions, code and open questions \
    that matter, briefly. Reply with the summary only.";

/// The question a compacted conversation opens with, answered by the summary: the request the
/// model was given for it (`Overflow::prompt`, a paragraph) is not kept in the shorter path.
pub const SUMMARY_LEAD: &str = "What have we covered so far?";

/// A tab's policy for a full context.
#[derive(Debug, Clone, PartialEq)]
pub struct Overflow {
    /// What to do.
    pub mode: OverflowMode,
    /// The share of the context (0.1 to 1.0) a prompt may fill before the mode acts.
    pub at: f64,
    /// The user message that asks for the summary (compact).
    pub prompt: String,
}

impl Default for Overflow {
    /// Stop at the limit, as the engine did before compaction existed.
    fn default() -> Self {
        Self {
            mode: OverflowMode::Stop,
            at: 0.9,
            prompt: DEFAULT_COMPACT_PROMPT.into(),
        }
    }
}

/// A tab's conversation was made shorter. The engine already follows the new path: the front
/// end shows it as a new version of the conversation (the old one stays) whose exchanges are
/// `prompt` ([`SUMMARY_LEAD`]) answered by `summary` (compact), then its newest `kept` exchanges.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// Compact or slide (a compaction whose summary came back empty slides).
    pub mode: OverflowMode,
    /// The new path's first user message, which the summary answers ([`SUMMARY_LEAD`]; the
    /// request the model was given for the summary is left out).
    pub prompt: String,
    /// The summary (compact): the new path's first answer.
    pub summary: Option<String>,
    /// Exchanges the summary covers.
    pub summarized: usize,
    /// Oldest exchanges left out altogether (slide, or too long for the summary's own turn).
    pub dropped: usize,
    /// Newest exchanges kept as they were.
    pub kept: usize,
    /// Tokens of the conversation before, and after.
    pub before: usize,
    /// Tokens after (the summary and the kept exchanges, before the next message).
    pub after: usize,
    /// Tokens of the summary's turn that were already resident, and that it prefilled.
    pub reused: usize,
    /// See `reused`.
    pub prefilled: usize,
    /// A turn follows (the message that did not fit); `false` after `Command::Compact`.
    pub resumes: bool,
}
