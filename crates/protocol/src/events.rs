//! What an engine tells a front end ([`Event`]): loading and readiness, a turn's progress, text,
//! thoughts and end, the conversation's size and where its session lives, tool calls, and
//! failures, each naming its tab where it is about one.

use crate::context::Compaction;
#[cfg(doc)]
use crate::messages::Command;
use crate::messages::{ProgressUnit, TabId, Tier, TurnEnd, TurnStats};
use crate::sampling::SamplingLayer;
use crate::tools::{ServerInfo, ToolCall, ToolInfo, ToolOutcome};

/// Engine → UI.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Start-up progress.
    Loading {
        /// What is happening, e.g. `loading weights` or `fetching the demo model`.
        stage: String,
        /// Units done (0 while no count is known).
        done: usize,
        /// Units in all (0: unknown).
        total: usize,
        /// What `done` and `total` count.
        unit: ProgressUnit,
    },
    /// The model is loaded and commands are served.
    Ready {
        /// The model's type, e.g. `gemma4_text`.
        model: String,
        /// The context limit per tab, in tokens.
        context_length: usize,
        /// Whether the model has a thinking mode.
        thinking: bool,
        /// Whether the model writes tool calls (Gemma 4): a front end may declare tools of its
        /// own ([`crate::ClientTool`]).
        tool_calls: bool,
        /// The sampling defaults the checkpoint declares (`generation_config.json`).
        generation: SamplingLayer,
    },
    /// The engine thread stopped on an internal error (a bug): no more events come. The UI
    /// ends every running turn and says so; quitting still saves the chats.
    EngineStopped {
        /// What happened and what to do.
        error: String,
    },
    /// The model could not be loaded; the engine thread has ended.
    LoadFailed {
        /// What went wrong and what to do.
        error: String,
    },
    /// Prompt tokens prefilled so far in this turn.
    Prefill {
        /// The tab.
        tab: TabId,
        /// Tokens done.
        done: usize,
        /// Tokens to prefill.
        total: usize,
        /// Tokens that were already resident and are not prefilled again.
        reused: usize,
    },
    /// More answer text.
    Token {
        /// The tab.
        tab: TabId,
        /// The new text (whole characters only).
        text: String,
    },
    /// More thought text (Gemma 4 thinking), apart from the answer.
    Thought {
        /// The tab.
        tab: TabId,
        /// The new text.
        text: String,
        /// The turn's thought tokens so far (see [`TurnStats::thought_tokens`]; 0 where the
        /// engine cannot tell).
        tokens: usize,
    },
    /// The turn ended.
    Finished {
        /// The tab.
        tab: TabId,
        /// Why it ended.
        end: TurnEnd,
        /// What it cost.
        stats: TurnStats,
    },
    /// The tab's conversation as it stands after a turn (committed and saved when its prompt
    /// was prefilled) or an attach: `tokens` tokens of the tab's context. Sent before
    /// [`Event::Finished`].
    Committed {
        /// The tab.
        tab: TabId,
        /// Tokens in the conversation.
        tokens: usize,
    },
    /// The tab's conversation now follows the path of [`Command::SetPath`]: `tokens` long, of
    /// which the first `common` are resident in its session (the next turn keeps at most
    /// those, and prefills the rest).
    Rebased {
        /// The tab.
        tab: TabId,
        /// Tokens in the conversation.
        tokens: usize,
        /// Tokens it shares with what the session holds.
        common: usize,
    },
    /// Where a tab's session now lives (device, host memory, or text only).
    TabState {
        /// The tab.
        tab: TabId,
        /// The tier.
        tier: Tier,
    },
    /// The checkpoint's chat template failed (sent once, with the template's line), and the
    /// family's built-in layout renders the turns instead.
    TemplateFallback {
        /// The tab whose turn found it.
        tab: TabId,
        /// What failed, and where.
        error: String,
    },
    /// Something the user should know about a tab's turn that did not stop it (a server's
    /// malformed usage numbers, a slow chat template).
    Notice {
        /// The tab.
        tab: TabId,
        /// What happened, and what to do.
        text: String,
    },
    /// The tools the engine can run, and each server's state: sent after [`Event::Ready`]
    /// once the servers have started, and again when one fails or comes back.
    Tools {
        /// The servers (and `builtin`).
        servers: Vec<ServerInfo>,
        /// Their tools.
        tools: Vec<ToolInfo>,
    },
    /// The model called a tool. With `approval`, the turn waits for
    /// [`Command::DecideTool`] (Esc, [`Command::Cancel`], stops it); without, it runs at once.
    ToolCall {
        /// The tab.
        tab: TabId,
        /// The call.
        call: ToolCall,
        /// The user must decide.
        approval: bool,
    },
    /// A call ended (ran, failed, was denied or stopped); the model has its response and the
    /// turn goes on.
    ToolResult {
        /// The tab.
        tab: TabId,
        /// What came back.
        outcome: ToolOutcome,
    },
    /// The tab's conversation was compacted or slid (see [`Compaction`]); sent after the
    /// engine moved to the new path and before the turn that follows, if one does.
    Compacted {
        /// The tab.
        tab: TabId,
        /// What was done.
        report: Compaction,
    },
    /// The turn failed; the tab's session is intact or, after a backend failure, empty and
    /// marked to start over.
    Failed {
        /// The tab.
        tab: TabId,
        /// What went wrong.
        error: String,
    },
}

impl Event {
    /// The tab it is about (`None` for the engine's own events: loading, ready, stopped).
    pub fn tab(&self) -> Option<TabId> {
        match self {
            Event::Prefill { tab, .. }
            | Event::Token { tab, .. }
            | Event::Thought { tab, .. }
            | Event::Finished { tab, .. }
            | Event::Committed { tab, .. }
            | Event::Rebased { tab, .. }
            | Event::TabState { tab, .. }
            | Event::TemplateFallback { tab, .. }
            | Event::Notice { tab, .. }
            | Event::ToolCall { tab, .. }
            | Event::ToolResult { tab, .. }
            | Event::Compacted { tab, .. }
            | Event::Failed { tab, .. } => Some(*tab),
            Event::Loading { .. }
            | Event::Ready { .. }
            | Event::EngineStopped { .. }
            | Event::Tools { .. }
            | Event::LoadFailed { .. } => None,
        }
    }
}
