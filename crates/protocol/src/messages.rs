//! What a front end tells an engine ([`Command`]), each naming its tab, and the plain data both
//! sides share: why a turn reused what it did, its stats and end, a tab's tier, exchanges and
//! attachments. The engine's answers are in [`crate::events`].

#[cfg(doc)]
use crate::events::Event;
use crate::tab_settings::TabSettings;
use crate::tools::ToolDecision;

/// Why a turn prefilled what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Nothing was resident: full prefill.
    New,
    /// The prompt extends the resident ids: only the suffix is prefilled.
    ExactPrefix,
    /// The prompt diverges from the resident ids: rewound to the longest common prefix.
    Rewind,
    /// The prompt equals the resident ids: the last token is prefilled again for fresh logits.
    Equal,
    /// The session was marked dirty by an earlier failure: full prefill.
    Dirty,
    /// The session had been dropped to text to free memory: full prefill.
    Evicted,
    /// The tab came back from disk without its KV state: full prefill.
    Restored,
    /// The prompt diverges where the sliding window can no longer rewind: full prefill.
    Mismatch,
}

impl Reuse {
    /// Every reason, for reading names back.
    pub const ALL: [Reuse; 8] = [
        Reuse::New,
        Reuse::ExactPrefix,
        Reuse::Rewind,
        Reuse::Equal,
        Reuse::Dirty,
        Reuse::Evicted,
        Reuse::Restored,
        Reuse::Mismatch,
    ];

    /// The reason named `name` (see [`Reuse::as_str`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The name shown to users and in stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Reuse::New => "new",
            Reuse::ExactPrefix => "exact_prefix",
            Reuse::Rewind => "rewind",
            Reuse::Equal => "equal",
            Reuse::Dirty => "dirty",
            Reuse::Evicted => "evicted",
            Reuse::Restored => "restored",
            Reuse::Mismatch => "mismatch",
        }
    }
}

/// What a turn cost.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStats {
    /// How the resident ids were reused.
    pub reuse: Reuse,
    /// Prompt tokens that were already resident.
    pub reused_tokens: usize,
    /// Prompt tokens that were prefilled.
    pub prefilled_tokens: usize,
    /// Prefill speed.
    pub prefill_tok_s: f64,
    /// Decode speed.
    pub decode_tok_s: f64,
    /// Seconds from the start of the turn to the first sampled token.
    pub ttft_s: f64,
    /// Tokens generated (the stop id excluded; tool responses not counted).
    pub generated_tokens: usize,
    /// Tool calls the model made in the turn.
    pub tool_calls: usize,
    /// Tokens of tool responses appended inside the turn (fed warm after the call, never a
    /// re-prefill of the history).
    pub tool_tokens: usize,
    /// Thought tokens of the turn (Gemma 4 thinking), over all its thought blocks: the tokens
    /// inside a thought channel, its name line and the budget's closing message included, the
    /// channel markers and tool-call tokens not; part of `generated_tokens`. 0 where the engine
    /// cannot tell (a remote server).
    pub thought_tokens: usize,
    /// What speculative decoding did in the turn (`None`: it did not run).
    pub speculation: Option<SpecStats>,
}

/// Speculative decoding in one turn.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SpecStats {
    /// Draft tokens checked.
    pub drafted: usize,
    /// Draft tokens the model picked too (kept).
    pub accepted: usize,
    /// Checking steps (one forward each).
    pub steps: usize,
    /// Answer tokens those steps gave (the accepted drafts and the model's own token after them).
    pub tokens: usize,
    /// Speculation was switched off for the rest of the turn: it measured slower than plain
    /// decoding.
    pub off: bool,
}

impl SpecStats {
    /// Share of the drafted tokens kept (0 when none was drafted).
    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.drafted.max(1) as f64
    }

    /// Answer tokens per checking step.
    pub fn tokens_per_step(&self) -> f64 {
        self.tokens as f64 / self.steps.max(1) as f64
    }

    /// As an answer's footer and the status line say it: `spec 72% · 2.1 tokens/step`, and
    /// `, then off (slower)` when it switched itself off.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "spec {:.0}% · {:.1} tokens/step",
            100.0 * self.acceptance(),
            self.tokens_per_step()
        );
        if self.off {
            s.push_str(", then off (slower)");
        }
        s
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The model ended its turn with this id (not resident: the next turn's template closes
    /// the turn).
    EndOfTurn(u32),
    /// The token budget ran out.
    Length,
    /// The user (or the caller) cancelled it.
    Cancelled,
    /// A stop string appeared in the text; the tokens that made it are not resident.
    StopString,
    /// The context limit was reached: the answer is cut there, visibly.
    ContextFull,
    /// The model called tools the front end answers (the tab's `client_tools`): the calls were
    /// told as [`Event::ToolCall`]s; the answer so far, up to its hand-over, is the tab's last
    /// exchange. The front end sends the responses with the path ([`Command::SetPath`]) and
    /// the model answers on after them with [`Command::Continue`].
    ToolCalls,
}

impl TurnEnd {
    /// A short description for users.
    pub fn describe(self) -> &'static str {
        match self {
            TurnEnd::EndOfTurn(_) => "done",
            TurnEnd::Length => "token limit reached",
            TurnEnd::Cancelled => "stopped",
            TurnEnd::StopString => "stop string",
            TurnEnd::ContextFull => "context full",
            TurnEnd::ToolCalls => "tool calls",
        }
    }
}

/// Where a session's KV state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// On the compute device, ready to run.
    Device,
    /// Copied to host memory; restored before its next turn without any prefill.
    Host,
    /// Dropped to text to free memory; the next turn prefills the history again.
    Cold,
}

/// One exchange of a transcript: what the user sent and what the model answered (its thought
/// left out, as chat templates render history).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exchange {
    /// The user's message.
    pub user: String,
    /// The pictures and recordings sent with it, in order: a conversation rebuilt from the
    /// transcript places them where they were sent (their towers run only when a prefill
    /// reaches them), so the model sees what the user sees.
    pub media: Vec<Attachment>,
    /// The model's answer (empty when it gave none).
    pub answer: String,
    /// The tool calls the answer made, in order, each placed in its text.
    pub calls: Vec<crate::CallMade>,
}

/// A conversation in ids as chats saved by earlier releases held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyConvo {
    /// The conversation up to the end of its last answer.
    pub ids: Vec<u32>,
    /// Header ids after BOS.
    pub header: usize,
    /// Where the last answer starts.
    pub last_answer: Option<usize>,
}

/// What a start-up stage's progress counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressUnit {
    /// Layers of the model loaded.
    #[default]
    Layers,
    /// Bytes downloaded.
    Bytes,
}

/// A conversation tab, numbered by the UI.
pub type TabId = u64;

/// A picture or a sound recording sent with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// Its file.
    pub path: std::path::PathBuf,
    /// A picture's soft tokens at most: 70, 140, 280, 560 or 1120 (a recording's count follows
    /// from its length).
    pub tokens: usize,
    /// What the file holds.
    pub kind: MediaKind,
}

/// What an attachment holds, and so which of the model's towers reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediaKind {
    /// A picture, for the vision tower.
    #[default]
    Image,
    /// Sound (WAV, FLAC, MP3, OGG), for the audio tower: 16 kHz mono, each 30 seconds its own
    /// span.
    Audio,
}

impl Attachment {
    /// A picture at `tokens` soft tokens at most.
    pub fn image(path: impl Into<std::path::PathBuf>, tokens: usize) -> Self {
        Self {
            path: path.into(),
            tokens,
            kind: MediaKind::Image,
        }
    }

    /// A sound recording.
    pub fn audio(path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            path: path.into(),
            tokens: 0,
            kind: MediaKind::Audio,
        }
    }
}

/// UI → engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The user sent `text` in `tab`, with `images` (pictures and recordings) before it: answer
    /// it.
    Submit {
        /// The tab.
        tab: TabId,
        /// The user's message.
        text: String,
        /// Pictures and recordings, in order; the model sees them before the text, as Google
        /// advises (pictures first, then recordings).
        images: Vec<Attachment>,
    },
    /// Cancel the tab's running turn within one prefill chunk or decode step.
    Cancel {
        /// The tab.
        tab: TabId,
    },
    /// Answer on from the end of the tab's conversation: after the last exchange's tool
    /// responses, which a front end that answers its own tools (see
    /// [`crate::ClientTool`]) sent with the path. The answer joins that exchange's.
    Continue {
        /// The tab.
        tab: TabId,
    },
    /// Answer the tab's last message again.
    Regenerate {
        /// The tab.
        tab: TabId,
    },
    /// Forget the tab, its session and its saved conversation (a running turn is stopped
    /// first).
    CloseTab {
        /// The tab.
        tab: TabId,
    },
    /// The tab's settings for its next turns, whole ([`TabSettings`]): a front end resolves
    /// them once (config layers, preset, the tab's own choices) and sends them again on every
    /// change. A changed system prompt, thinking or declared tools change the conversation's
    /// header, so the next turn rewinds to it; the rest applies to the next turn as it is. What
    /// the engine cannot honour (a context past the model's, thinking without a thinking mode,
    /// a required tool with none configured) is told with a [`Event::Notice`] naming it, not a
    /// failure: the other settings still apply, and a turn sent after them runs.
    Configure {
        /// The tab.
        tab: TabId,
        /// Its settings.
        settings: Box<TabSettings>,
    },
    /// Ties the tab to the chat the UI saves under `chat` (letters, digits, `-`, `_`): the
    /// engine keeps that conversation (its ids, its KV state) and brings it back here. When the
    /// engine has nothing saved for it, or saved it for other weights, it rebuilds the
    /// conversation from `history`, the transcript's exchanges in order (the next turn then
    /// prefills it, reason `restored`); `legacy` is what chats saved by earlier releases held.
    /// A new tab is attached with an empty history. The engine answers with
    /// [`Event::Committed`] when the tab holds a conversation.
    Attach {
        /// The tab.
        tab: TabId,
        /// The chat's stable name.
        chat: String,
        /// The transcript's exchanges, oldest first.
        history: Vec<Exchange>,
        /// The conversation as earlier releases saved it with the chat, if they did.
        legacy: Option<LegacyConvo>,
    },
    /// The tab now shows another path through its conversation tree (an earlier message was
    /// edited, or another version of a turn chosen): `history` is that path's exchanges, oldest
    /// first. The exchanges it shares with the conversation the engine holds keep their ids
    /// exactly; the rest are rendered with the chat template. The session is not touched: the
    /// next turn rewinds it to the longest common prefix and prefills only what differs
    /// (reason `rewind`). Answered with [`Event::Committed`] and [`Event::Rebased`]; refused
    /// while a turn runs in the tab.
    SetPath {
        /// The tab.
        tab: TabId,
        /// The path's exchanges, oldest first.
        history: Vec<Exchange>,
    },
    /// The tab starts as a copy of tab `from` (its session, warm, and its conversation), then
    /// follows `history` as [`Command::SetPath`] does: "branch into a new tab" shares the
    /// prefix it copies instead of prefilling it again. The tab keeps its own chat.
    Fork {
        /// The new tab.
        tab: TabId,
        /// The tab it copies.
        from: TabId,
        /// Its exchanges, oldest first.
        history: Vec<Exchange>,
    },
    /// The user's answer to [`Event::ToolCall`] `call` of the tab (one that needed approval).
    DecideTool {
        /// The tab.
        tab: TabId,
        /// The call's id.
        call: u64,
        /// Run it (once, for the tab, always) or deny it with a note.
        decision: ToolDecision,
    },
    /// Compact the tab's conversation now (`/compact`): the model summarizes the older
    /// exchanges whatever the context's fill, answered with [`Event::Compacted`] (or `Failed`
    /// when there is nothing to compact).
    Compact {
        /// The tab.
        tab: TabId,
    },
    /// End the engine thread.
    Shutdown,
}

impl Command {
    /// The tab it is about (`None` for [`Command::Shutdown`]).
    pub fn tab(&self) -> Option<TabId> {
        match self {
            Command::Submit { tab, .. }
            | Command::Cancel { tab }
            | Command::Continue { tab }
            | Command::Regenerate { tab }
            | Command::CloseTab { tab }
            | Command::Configure { tab, .. }
            | Command::Attach { tab, .. }
            | Command::SetPath { tab, .. }
            | Command::Fork { tab, .. }
            | Command::DecideTool { tab, .. }
            | Command::Compact { tab } => Some(*tab),
            Command::Shutdown => None,
        }
    }
}
