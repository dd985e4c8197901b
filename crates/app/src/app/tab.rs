//! One conversation tab as the UI sees it: its transcript (each message with a revision, so that
//! the renderer lays out again only what changed), input, scroll position, phase and
//! warm-session state.

use std::time::Instant;

use super::chip::Chip;
use super::editor::Editor;
use super::tab_choices::TabChoices;
use super::tools::ToolRun;
use crate::attach::{TextFile, compose};
use crate::config::Budgets;
use gemma_protocol::{TabId, Tier, ToolCall, TurnStats};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user.
    User,
    /// The model.
    Model,
    /// A note from the app.
    Notice,
    /// An error.
    Error,
    /// The tab's system prompt (always the first message when there is one).
    System,
}

/// Messages that left the shown path, hanging from one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// The message they follow (0: the start of the conversation).
    pub parent: u64,
    /// The messages in order, each the parent of the next.
    pub messages: Vec<Message>,
}

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text (markdown for the model).
    pub text: String,
    /// The model's thought, if it thought.
    pub thought: String,
    /// A dim line under it: how the turn ended and what it cost.
    pub footer: Option<String>,
    /// A dim line under an answer while it streams (how much it thought so far); the footer
    /// takes its place.
    pub live: Option<String>,
    /// Its revision: it changed when this did (see [`Tab::touched`]).
    pub rev: u64,
    /// Its id in the tab's conversation tree (unique in the tab; given by [`Tab::push`]).
    pub id: u64,
    /// Which version of its turn it is, and of how many, when the turn has several (edits,
    /// regenerated answers): drawn as ‹n/m›.
    pub versions: Option<(usize, usize)>,
    /// What the answer cost, once it is finished.
    pub stats: Option<TurnStats>,
    /// The pictures sent with it (a user message).
    pub images: Vec<Chip>,
    /// The text files sent with it, before its text (a user message): see [`Message::sent`].
    pub files: Vec<TextFile>,
    /// The tools the answer called, in order (a model message).
    pub tools: Vec<ToolRun>,
    /// Its tool calls shown with their arguments and results (Enter on the selected answer).
    pub expanded: bool,
}

impl Message {
    /// A message with text only.
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            text: text.into(),
            thought: String::new(),
            footer: None,
            live: None,
            rev: 0,
            id: 0,
            versions: None,
            stats: None,
            images: Vec::new(),
            files: Vec::new(),
            tools: Vec::new(),
            expanded: false,
        }
    }

    /// The text the model reads for it: its files' blocks, then its text ([`compose`]), the
    /// same for the turn sent and for the history rebuilt from it.
    pub fn sent(&self) -> String {
        compose(&self.files, &self.text)
    }
}

/// What the tab's engine session is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Nothing.
    Idle,
    /// Sent; the engine has not started on it yet.
    Waiting,
    /// Prefilling the prompt.
    Prefilling {
        /// Tokens done.
        done: usize,
        /// Tokens in all.
        total: usize,
    },
    /// Streaming the answer.
    Generating {
        /// Text pieces received.
        pieces: usize,
        /// When the first one came.
        since: Instant,
    },
}

impl Phase {
    /// Whether a turn is running.
    pub fn busy(&self) -> bool {
        !matches!(self, Phase::Idle)
    }
}

/// A conversation tab.
#[derive(Debug, Clone)]
pub struct Tab {
    /// The engine's name for it.
    pub id: TabId,
    /// Shown in the tab bar.
    pub title: String,
    /// The transcript.
    pub messages: Vec<Message>,
    /// What is being typed.
    pub editor: Editor,
    /// Sent messages, oldest first, for Up/Down recall.
    pub history: Vec<String>,
    /// The history entry shown in the editor, while recalling.
    pub recall: Option<usize>,
    /// What the engine is doing for it.
    pub phase: Phase,
    /// Where its session lives.
    pub tier: Tier,
    /// Whether its last turn failed.
    pub failed: bool,
    /// The last finished turn's stats.
    pub last_stats: Option<TurnStats>,
    /// Tokens in its context.
    pub context_used: usize,
    /// The top line of the view while scrolled back; `None` follows the output.
    pub pin: Option<usize>,
    /// Output arrived below a pinned view.
    pub new_output: bool,
    /// Its own settings over the app's (sampling, answer length, thinking, tools, context);
    /// its system prompt is its first message.
    pub choices: TabChoices,
    /// The thought budget of its running (or last) turn (`None`: unbounded, or thinking off).
    pub turn_budget: Option<usize>,
    /// Thought tokens of its running (or last) turn so far.
    pub thought_tokens: usize,
    /// A message found by search: shown at the top of the view and highlighted until the next
    /// message is sent.
    pub focus: Option<usize>,
    /// The preset it took last (`/preset NAME`, or the default for new tabs).
    pub preset: Option<String>,
    /// Its file name in the chats directory, and the name the engine keeps its conversation
    /// under.
    pub uid: String,
    /// Lines of its transcript as last drawn (the renderer measures them), which bound
    /// scrolling.
    pub lines: usize,
    /// The line each message starts at, as last drawn (mouse clicks select by it).
    pub starts: Vec<usize>,
    /// The other branches of its conversation tree: see [`super::tree`].
    pub branches: Vec<Branch>,
    /// The message selected to edit, branch from or switch versions of.
    pub selected: Option<usize>,
    /// The user message whose new version the input holds: sending makes a branch.
    pub editing: Option<usize>,
    /// Pictures attached to the next message.
    pub attachments: Vec<Chip>,
    /// Text files attached to the next message.
    pub files: Vec<TextFile>,
    /// Soft tokens per picture at most, for pictures attached from now on.
    pub image_tokens: usize,
    /// The next message id.
    pub next_msg: u64,
    /// Tool calls waiting for the user's answer, oldest first (the first is shown).
    pub approvals: std::collections::VecDeque<ToolCall>,
    /// The note being typed to deny the first waiting call with (`n` on the approval).
    pub note: Option<Editor>,
    /// Edits so far: a changed message takes the next number as its revision.
    edits: u64,
}

impl Tab {
    /// An empty tab.
    pub fn new(id: TabId, title: String, choices: TabChoices) -> Self {
        Self {
            id,
            title,
            messages: Vec::new(),
            editor: Editor::default(),
            history: Vec::new(),
            recall: None,
            phase: Phase::Idle,
            tier: Tier::Device,
            failed: false,
            last_stats: None,
            context_used: 0,
            pin: None,
            new_output: false,
            choices,
            turn_budget: None,
            thought_tokens: 0,
            focus: None,
            preset: None,
            uid: String::new(),
            lines: 0,
            starts: Vec::new(),
            branches: Vec::new(),
            selected: None,
            editing: None,
            attachments: Vec::new(),
            files: Vec::new(),
            image_tokens: super::chip::DEFAULT_TOKENS,
            next_msg: 1,
            approvals: std::collections::VecDeque::new(),
            note: None,
            edits: 0,
        }
    }

    /// A turn was sent: its thought is counted from 0 against the budget of the tab's level.
    pub fn turn_started(&mut self, budgets: &Budgets) {
        self.turn_budget = self.choices.thinking.budget(budgets);
        self.thought_tokens = 0;
    }

    /// How much the running (or last) turn thought: `thought 1,984/2,048`, or without a budget
    /// `thought 1,984`; `None` before any thought.
    pub fn thought_note(&self) -> Option<String> {
        use crate::config::thinking::grouped;
        let n = self.thought_tokens;
        (n > 0).then(|| match self.turn_budget {
            Some(b) => format!("thought {}/{}", grouped(n), grouped(b)),
            None => format!("thought {}", grouped(n)),
        })
    }

    /// Counts one more streamed piece (answer or thought) for the phase and the context meter.
    pub fn generated(&mut self, now: Instant) {
        self.phase = match self.phase {
            Phase::Generating { pieces, since } => Phase::Generating {
                pieces: pieces + 1,
                since,
            },
            _ => Phase::Generating {
                pieces: 1,
                since: now,
            },
        };
        self.context_used += 1;
    }

    /// Adds a message.
    pub fn push(&mut self, mut m: Message) {
        // Something new: the found message is no longer the point.
        self.focus = None;
        if m.id == 0 {
            m.id = self.fresh_id();
        }
        self.messages.push(m);
        let i = self.messages.len() - 1;
        self.messages[i].versions = self.version_of(i);
        self.touched(self.messages.len() - 1);
    }

    /// The model message being streamed, created on first use.
    pub fn answer(&mut self) -> &mut Message {
        if self
            .messages
            .last()
            .is_none_or(|m| m.role != Role::Model || m.footer.is_some())
        {
            self.push(Message::new(Role::Model, ""));
        }
        let i = self.messages.len() - 1;
        self.touched(i);
        &mut self.messages[i]
    }

    /// Marks message `i` as changed (the renderer lays out again what changed); past the end:
    /// messages were removed.
    pub fn touched(&mut self, i: usize) {
        self.edits += 1;
        if let Some(m) = self.messages.get_mut(i) {
            m.rev = self.edits;
        }
        if self.pin.is_some() {
            self.new_output = true;
        }
    }

    /// The top line of a view `height` lines tall on a transcript of `lines` lines.
    pub fn view_top(&self, lines: usize, height: usize) -> usize {
        let bottom = lines.saturating_sub(height);
        self.pin.map_or(bottom, |p| p.min(bottom))
    }

    /// Scrolls by `delta` lines (negative: up); reaching the bottom follows the output again.
    pub fn scroll(&mut self, delta: isize, height: usize) {
        let bottom = self.lines.saturating_sub(height);
        let top = self.view_top(self.lines, height) as isize + delta;
        let top = top.clamp(0, bottom as isize) as usize;
        if top >= bottom {
            self.pin = None;
            self.new_output = false;
        } else {
            self.pin = Some(top);
        }
    }

    /// The system prompt, if the tab has one.
    pub fn system(&self) -> Option<&str> {
        self.messages
            .first()
            .filter(|m| m.role == Role::System)
            .map(|m| m.text.as_str())
    }

    /// Sets (or with `None` removes) the system prompt, the first message.
    pub fn set_system(&mut self, text: Option<String>) {
        let had = self.system().is_some();
        match (text, had) {
            (Some(t), true) => {
                self.messages[0].text = t;
                self.touched(0);
            }
            (Some(t), false) => {
                let mut m = Message::new(Role::System, t);
                m.id = self.fresh_id();
                self.messages.insert(0, m);
                for i in 0..self.messages.len() {
                    self.touched(i);
                }
            }
            (None, true) => {
                self.messages.remove(0);
                for i in 0..self.messages.len() {
                    self.touched(i);
                }
            }
            (None, false) => {}
        }
    }

    /// A message id not used in the tab yet.
    pub fn fresh_id(&mut self) -> u64 {
        let id = self.next_msg;
        self.next_msg += 1;
        id
    }

    /// The text of the last model answer.
    pub fn last_answer(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Model && !m.text.is_empty())
            .map(|m| m.text.as_str())
    }
}

impl Tab {
    /// Tokens the attachments waiting to be sent will take: pictures' soft tokens and files'
    /// estimates ([`crate::attach::estimate_tokens`]).
    pub fn pending_tokens(&self) -> usize {
        let pictures: usize = self.attachments.iter().map(Chip::soft_tokens).sum();
        pictures + self.files.iter().map(TextFile::tokens).sum::<usize>()
    }

    /// The chips of what waits to be sent: pictures, then files.
    pub fn chip_labels(&self) -> Vec<String> {
        let pictures = self.attachments.iter().map(Chip::label);
        pictures
            .chain(self.files.iter().map(TextFile::label))
            .collect()
    }
}
