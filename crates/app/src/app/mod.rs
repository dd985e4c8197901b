//! The UI's state and its one `update`: every input (keys, paste, mouse, resize, ticks, engine
//! events) goes through [`App::update`], which changes the state and returns the commands for
//! the engine. It sees the engine only through `gemma_protocol`, and draws nothing.

mod approval;
pub mod attachments;
pub mod chat_load;
pub mod chat_tree;
pub mod chip;
pub mod compaction;
pub mod editor;
mod events;
pub mod fences;
mod keys;
mod lifecycle;
pub mod persist;
mod preset;
mod record;
pub mod search;
pub mod settings;
pub mod slash;
pub mod tab;
pub mod tab_choices;
mod tool_cmds;
pub mod tools;
pub mod tree;
mod versions;

/// Most input rows shown before the input scrolls.
pub const INPUT_ROWS: u16 = 8;

use std::time::Instant;

use crossterm::event::{KeyEvent, MouseEvent, MouseEventKind};

use self::editor::Editor;
use self::settings::SettingsEdit;
pub use self::settings::TurnSettings;
use self::tab::{Message, Phase, Role, Tab};
pub use self::tab_choices::TabChoices;
use crate::config::Config;
use crate::config::action::Action;
use crate::config::keymap::Keymap;
use gemma_protocol::ProgressUnit;
use gemma_protocol::{Command, Event, TabId};

/// One input to the app.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// A key press.
    Key(KeyEvent),
    /// Pasted text (bracketed paste).
    Paste(String),
    /// A mouse event.
    Mouse(MouseEvent),
    /// The terminal's new size.
    Resize(u16, u16),
    /// Time passes: lay out what changed; the caller draws after it.
    Tick(Instant),
    /// From the engine.
    Engine(Event),
    /// The config file changed: its new contents, or why they are invalid.
    Config(Result<Box<Config>, String>),
    /// Something went wrong outside the engine (e.g. saving chats).
    Error(String),
}

/// The model as the UI knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelState {
    /// Its name (the file or directory).
    pub name: String,
    /// `cpu`, `wgpu` or `cuda`.
    pub backend: String,
    /// Tokens per tab.
    pub context_limit: usize,
    /// Whether it can think.
    pub thinking: bool,
    /// Start-up progress.
    pub loading: Loading,
    /// Why it could not be loaded.
    pub load_error: Option<String>,
    /// Loaded and serving.
    pub ready: bool,
    /// The checkpoint's chat template failed and the built-in layout renders the turns.
    pub template_fallback: bool,
}

/// Start-up progress as the engine last reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loading {
    /// What is happening.
    pub stage: String,
    /// Units done.
    pub done: usize,
    /// Units in all (0: unknown).
    pub total: usize,
    /// What they count.
    pub unit: ProgressUnit,
}

impl Default for Loading {
    fn default() -> Self {
        Self {
            stage: "starting".into(),
            done: 0,
            total: 0,
            unit: ProgressUnit::Layers,
        }
    }
}

/// What the renderer measured of the shown tab's transcript: see [`App::measured`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Measured {
    /// The tab.
    pub tab: TabId,
    /// Lines of its transcript.
    pub lines: usize,
    /// Where a found or selected message put the top of the view.
    pub focus_top: Option<usize>,
    /// The line each message starts at.
    pub starts: Vec<usize>,
}

/// A popup over the app.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    /// None.
    None,
    /// The keys.
    Help,
    /// Close a generating tab?
    ConfirmClose(TabId),
    /// A new name for the active tab.
    Rename(Editor),
    /// The active tab's sampling.
    Settings(SettingsEdit),
    /// Search across the chats.
    Search(search::SearchState),
}

/// The whole UI state.
#[derive(Debug)]
pub struct App {
    /// Open tabs, in bar order.
    pub tabs: Vec<Tab>,
    /// Index of the shown tab.
    pub active: usize,
    next_id: TabId,
    /// The model.
    pub model: ModelState,
    /// Keys.
    pub keymap: Keymap,
    /// The theme; the renderer owns the styles.
    pub theme: crate::config::Theme,
    /// What new tabs start with.
    pub settings: TurnSettings,
    /// Thoughts expanded.
    pub show_thoughts: bool,
    /// The popup shown.
    pub overlay: Overlay,
    /// Lines the help overlay is scrolled down by (it scrolls when the keys outgrow the screen).
    pub help_scroll: u16,
    /// Terminal size.
    pub size: (u16, u16),
    /// The app should end.
    pub quit: bool,
    /// Ctrl+C was pressed once on an idle app.
    pub quit_armed: bool,
    /// The last error, for the status line.
    pub last_error: Option<String>,
    /// A short note for the status line (e.g. "copied").
    pub flash: Option<String>,
    /// Text to put on the clipboard (taken by the terminal loop).
    pub clipboard: Option<String>,
    /// Something changed since the last draw.
    pub dirty: bool,
    /// The config in force (for live reload to tell what changed).
    pub config: Option<Box<Config>>,
    /// Closed tabs' chats (in the data dir's `chats/closed/`), which search finds and reopens:
    /// each file name with its chat.
    pub closed: Vec<(String, crate::chats::SavedChat)>,
    /// The engine's tools, as it last told them (`None`: not yet).
    pub catalogue: Option<tools::Catalogue>,
    /// The user's config file, where "always approve" is saved (`None`: there is none to
    /// write).
    pub config_path: Option<std::path::PathBuf>,
    /// Saves queued for the saver thread.
    saves: Vec<crate::chats::SaveJob>,
    /// Turns sent before the model was ready, held until it is (so that they use the model's
    /// own sampling defaults).
    pending: Vec<Command>,
    now: Instant,
    /// Where push-to-talk takes its recordings from.
    pub mic: Box<dyn crate::mic::Microphone>,
    /// The recording running, if any.
    pub recording: Option<Box<dyn crate::mic::Recording>>,
    /// Where recordings are kept (the data directory's `recordings/`; `None`: nowhere, and
    /// push-to-talk says so).
    pub recordings_dir: Option<std::path::PathBuf>,
}

impl App {
    /// An app with one empty tab; the commands set that tab up in the engine.
    pub fn new(
        model: ModelState,
        keymap: Keymap,
        theme: crate::config::Theme,
        settings: TurnSettings,
        show_thoughts: bool,
    ) -> (Self, Vec<Command>) {
        let mut app = Self {
            tabs: Vec::new(),
            active: 0,
            next_id: 1,
            model,
            keymap,
            theme,
            settings,
            show_thoughts,
            overlay: Overlay::None,
            help_scroll: 0,
            size: (80, 24),
            quit: false,
            quit_armed: false,
            last_error: None,
            flash: None,
            clipboard: None,
            dirty: true,
            config: None,
            closed: Vec::new(),
            catalogue: None,
            config_path: None,
            saves: Vec::new(),
            pending: Vec::new(),
            now: Instant::now(),
            mic: crate::mic::system(),
            recording: None,
            recordings_dir: None,
        };
        let cmds = app.open_tab();
        (app, cmds)
    }

    /// The shown tab.
    pub fn tab(&self) -> Option<&Tab> {
        self.tabs.get(self.active)
    }

    fn tab_mut(&mut self) -> Option<&mut Tab> {
        self.tabs.get_mut(self.active)
    }

    fn by_id(&mut self, id: TabId) -> Option<&mut Tab> {
        self.tabs.iter_mut().find(|t| t.id == id)
    }

    /// A hint naming the help key.
    pub fn keymap_hint(&self) -> String {
        match self.keymap.key_for(Action::Help) {
            Some(k) => format!("{k} shows every key."),
            None => String::new(),
        }
    }

    /// Rows of the input box, its border included (it grows with its text up to
    /// [`INPUT_ROWS`] lines); of the approval pane in its place while a tool call waits.
    pub fn input_height(&self) -> u16 {
        if let Some(h) = self.approval_height() {
            return h;
        }
        let w = self.size.0.saturating_sub(2) as usize;
        let rows = self.tab().map_or(1, |t| t.editor.layout(w).0.len()) as u16;
        let chips = u16::from(
            self.tab()
                .is_some_and(|t| !t.attachments.is_empty() || !t.files.is_empty()),
        );
        rows.clamp(1, INPUT_ROWS) + 2 + chips
    }

    /// Lines of transcript visible: the screen less the tab bar, the input and the status line.
    pub fn transcript_height(&self) -> usize {
        self.size.1.saturating_sub(self.input_height() + 2).max(1) as usize
    }

    /// Takes what the renderer measured of the shown tab's transcript (its lines at the current
    /// width, which bound scrolling, and where each message starts, which clicks select by).
    pub fn measured(&mut self, m: Measured) {
        if let Some(t) = self.tabs.iter_mut().find(|t| t.id == m.tab) {
            t.lines = m.lines;
            t.starts = m.starts;
            // The view stays where the found message put it.
            if let Some(top) = m.focus_top {
                t.pin = Some(top);
            }
        }
    }

    /// Applies one input; returns the commands for the engine.
    pub fn update(&mut self, msg: Msg) -> Vec<Command> {
        // A tick redraws only while a turn runs (the tok/s figure moves); key releases and mouse
        // moves change nothing; anything else does.
        let inert = match &msg {
            Msg::Tick(_) => !self.tabs.iter().any(|t| t.phase.busy()) && self.recording.is_none(),
            Msg::Key(k) => k.kind == crossterm::event::KeyEventKind::Release,
            Msg::Mouse(m) => !matches!(
                m.kind,
                MouseEventKind::ScrollUp
                    | MouseEventKind::ScrollDown
                    | MouseEventKind::Down(crossterm::event::MouseButton::Left)
            ),
            _ => false,
        };
        self.dirty |= !inert;
        match msg {
            Msg::Key(k) => self.key(k),
            Msg::Paste(text) => {
                if self.overlay == Overlay::None && self.paste_note(&text) {
                    return Vec::new();
                }
                match &mut self.overlay {
                    Overlay::Rename(e) => e.insert(&text.replace(['\n', '\r'], " ")),
                    _ => {
                        if !self.pasted_picture(&text)
                            && let Some(t) = self.tab_mut()
                        {
                            t.editor.insert(&text);
                        }
                    }
                }
                Vec::new()
            }
            Msg::Mouse(m) => {
                let h = self.transcript_height();
                let delta = match m.kind {
                    MouseEventKind::ScrollUp => -3,
                    MouseEventKind::ScrollDown => 3,
                    _ => {
                        if self.overlay == Overlay::None {
                            self.click(&m);
                        }
                        return Vec::new();
                    }
                };
                if let Some(t) = self.tab_mut() {
                    t.scroll(delta, h);
                }
                Vec::new()
            }
            Msg::Resize(w, h) => {
                self.size = (w, h);
                Vec::new()
            }
            Msg::Tick(now) => {
                self.now = now;
                self.recording_tick();
                Vec::new()
            }
            Msg::Engine(e) => self.engine(e),
            Msg::Config(Ok(c)) => self.reload(*c),
            Msg::Error(e) => {
                // Shown where it is read, not only in the status line (which may be cut).
                if let Some(t) = self.tab_mut()
                    && t.messages.last().is_none_or(|m| m.text != e)
                {
                    t.push(Message::new(Role::Error, e.clone()));
                }
                self.last_error = Some(e);
                Vec::new()
            }
            Msg::Config(Err(e)) => {
                // Shown at once, not behind an earlier "config reloaded".
                self.flash = None;
                self.last_error = Some(format!("config not applied, the last good one stays: {e}"));
                Vec::new()
            }
        }
    }

    /// The phase text for the status line, e.g. `prefilling 1200/3400`.
    pub fn phase_text(&self) -> String {
        let Some(t) = self.tab() else {
            return String::new();
        };
        match t.phase {
            Phase::Idle if t.failed => "failed".into(),
            Phase::Idle => "idle".into(),
            _ if t.waiting_call().is_some() => "waiting for your answer to a tool call".into(),
            _ if t.running_tool().is_some() => {
                let name = t.running_tool().map_or("", |r| r.name.as_str());
                format!("running tool {}", gemma_protocol::text::short(name, 30))
            }
            Phase::Waiting if !self.model.ready => "waiting for the model".into(),
            Phase::Waiting => "queued".into(),
            Phase::Prefilling { done, total } => format!("prefilling {done}/{total}"),
            Phase::Generating { pieces, since } => {
                let secs = self.now.saturating_duration_since(since).as_secs_f64();
                if secs > 0.2 {
                    format!("generating {:.1} tok/s", pieces as f64 / secs)
                } else {
                    "generating".into()
                }
            }
        }
    }
}
