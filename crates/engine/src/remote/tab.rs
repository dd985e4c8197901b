//! A tab as the remote engine keeps it: its conversation in text (with each exchange's
//! pictures and tool round-trips, which every request re-sends), its settings, its tools and
//! approvals, and the turn that runs in it.

use serde_json::Value;

use super::tooling::ToolTurn;
use crate::protocol::{Exchange, TabSettings};
use crate::tools::TabTools;

/// A tab as the remote engine keeps it.
#[derive(Default)]
pub(super) struct RemoteTab {
    pub history: Vec<Exchange>,
    /// Each exchange's pictures and recordings, as data URLs, one entry per `history` entry.
    pub pictures: Vec<Vec<String>>,
    /// Each exchange's assistant-side messages when it called tools (empty: its answer alone),
    /// one entry per `history` entry.
    pub replies: Vec<Vec<Value>>,
    /// The running turn's pictures, which join `pictures` when it ends.
    pub pending: Vec<String>,
    /// Its settings for the next turns, as the front end sent them (the server keeps its own
    /// context and overflow).
    pub settings: TabSettings,
    /// The user was told that the server does not enforce a thought budget.
    pub budget_told: bool,
    /// Tokens of the conversation by the server's count (0: none yet).
    pub tokens: usize,
    /// The running request's cancel switch.
    pub running: Option<tokio::sync::oneshot::Sender<()>>,
    /// The tools the user approved for it.
    pub tools: TabTools,
    /// The running turn's tool rounds, when it declares tools.
    pub turn: Option<ToolTurn>,
    /// The summary being written, when the running request is one (`/compact`).
    pub compacting: Option<super::compact::Compacting>,
}

impl RemoteTab {
    /// Whether a turn runs (a request, or calls between two).
    pub fn busy(&self) -> bool {
        self.running.is_some() || self.turn.is_some()
    }
}
