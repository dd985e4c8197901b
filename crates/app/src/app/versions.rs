//! Moving about the conversation tree from the keyboard and the mouse: selecting a message,
//! editing an earlier user message (sent as a new version), switching a turn's versions ‹n/m›,
//! answering again as a new version, copying a path into a new tab, and opening an answer's tool
//! calls. Every change of path is told to the engine with [`Command::SetPath`], which keeps what
//! the paths share warm.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};

use super::App;
use super::persist::exchanges;
use super::tab::{Phase, Role};
use gemma_protocol::Command;

impl App {
    /// Keys while a message is selected: Up/Down move, Left/Right switch versions, Enter edits,
    /// `b` copies into a new tab, Esc ends the selection. `None`: the key is not one of these
    /// (the selection ends and the key does what it does).
    pub(super) fn selection_key(&mut self, k: &KeyEvent) -> Option<Vec<Command>> {
        let t = self.tab_mut()?;
        let i = t.selected?;
        if !k.modifiers.difference(KeyModifiers::SHIFT).is_empty() {
            return None;
        }
        let cmds = match k.code {
            KeyCode::Up => {
                self.select(-1);
                Vec::new()
            }
            KeyCode::Down => {
                self.select(1);
                Vec::new()
            }
            KeyCode::Left => self.cycle(Some(i), -1),
            KeyCode::Right => self.cycle(Some(i), 1),
            KeyCode::Enter => {
                self.edit(i);
                Vec::new()
            }
            KeyCode::Char('b') => self.branch_tab(),
            KeyCode::Esc => {
                t.selected = None;
                Vec::new()
            }
            _ => {
                t.selected = None;
                return None;
            }
        };
        Some(cmds)
    }

    /// Moves the selection `delta` messages (user, model and system ones), starting from the
    /// last; below the last it ends.
    pub(super) fn select(&mut self, delta: isize) {
        let Some(t) = self.tab_mut() else { return };
        let pickable = |r: Role| matches!(r, Role::User | Role::Model | Role::System);
        let n = t.messages.len() as isize;
        let mut i = t.selected.map_or(n, |s| s as isize);
        loop {
            i += delta.signum();
            if i < 0 {
                return;
            }
            if i >= n {
                t.selected = None;
                return;
            }
            if pickable(t.messages[i as usize].role) {
                break;
            }
        }
        t.selected = Some(i as usize);
        self.flash = Some(
            "Enter edits · ←/→ versions · b copies into a new tab · Esc ends the selection".into(),
        );
    }

    /// Puts message `i` in the input: a user message to send as a new version, the system prompt
    /// as `/system TEXT`; opens or folds an answer's tool calls.
    fn edit(&mut self, i: usize) {
        let Some(t) = self.tab_mut() else { return };
        let Some(m) = t.messages.get(i) else { return };
        match m.role {
            Role::User => {
                let text = m.text.clone();
                // Its pictures and files go with the new version unless removed (/detach).
                t.attachments = m.images.clone();
                t.files = m.files.clone();
                t.editor.set(&text);
                t.editing = Some(i);
                t.selected = None;
                self.flash = Some(
                    "editing: Enter sends it as a new version (the old one stays, ‹n/m›) · \
                     Esc cancels"
                        .into(),
                );
            }
            Role::System => {
                let text = format!("/system {}", m.text);
                t.editor.set(&text);
                t.selected = None;
            }
            Role::Model if !m.tools.is_empty() => {
                let open = !m.expanded;
                t.messages[i].expanded = open;
                t.touched(i);
                self.flash = Some(if open {
                    "tool calls opened: Enter folds them".into()
                } else {
                    "tool calls folded".into()
                });
            }
            _ => {
                self.flash = Some(
                    "an answer is not edited: ←/→ switch its versions, or edit the message \
                     above it"
                        .into(),
                );
            }
        }
    }

    /// Ends an edit without sending it; false when there was none.
    pub(super) fn cancel_edit(&mut self) -> bool {
        let Some(t) = self.tab_mut() else {
            return false;
        };
        if t.editing.take().is_none() {
            return false;
        }
        t.editor.take();
        t.attachments.clear();
        t.files.clear();
        self.flash = Some("edit cancelled".into());
        true
    }

    /// Shows another version of message `at`'s turn (else of the last turn that has several),
    /// `delta` on.
    pub(super) fn cycle(&mut self, at: Option<usize>, delta: isize) -> Vec<Command> {
        let Some(t) = self.tabs.get_mut(self.active) else {
            return Vec::new();
        };
        if t.phase.busy() {
            self.flash = Some("a turn is running in this tab: Esc stops it".into());
            return Vec::new();
        }
        let at = at.or_else(|| t.messages.iter().rposition(|m| m.versions.is_some()));
        let Some(i) = at else {
            return Vec::new();
        };
        let Some((n, m)) = t.cycle_version(i, delta) else {
            self.flash = Some("this turn has one version".into());
            return Vec::new();
        };
        t.selected = t.selected.map(|_| i);
        t.editing = None;
        self.flash = Some(format!("version {n}/{m}"));
        let cmd = Command::SetPath {
            tab: t.id,
            history: exchanges(&t.messages),
        };
        self.save(self.active);
        vec![cmd]
    }

    /// Answers the last message again as a new version: the old answer stays, ‹n/m›.
    pub(super) fn regenerate(&mut self) -> Vec<Command> {
        let budgets = self.settings.thinking_budgets;
        let Some(t) = self.tabs.get_mut(self.active) else {
            return Vec::new();
        };
        if t.phase.busy() {
            return Vec::new();
        }
        if t.last_answer().is_none() {
            self.flash = Some("there is no answer to regenerate yet".into());
            return Vec::new();
        }
        if let Some(u) = t.messages.iter().rposition(|m| m.role == Role::User) {
            t.fork_at(u + 1);
        }
        t.phase = Phase::Waiting;
        t.failed = false;
        t.turn_started(&budgets);
        vec![Command::Regenerate { tab: t.id }]
    }

    /// Copies the path up to the selected message (else all of it) into a new tab, which starts
    /// from a copy of this tab's session. A selected message of the user's is not copied but put
    /// in the new tab's input, to be changed and sent there.
    pub(super) fn branch_tab(&mut self) -> Vec<Command> {
        let Some(src) = self.tab() else {
            return Vec::new();
        };
        if src.phase.busy() {
            self.flash = Some("a turn is running in this tab: Esc stops it".into());
            return Vec::new();
        }
        let draft = src
            .selected
            .and_then(|i| src.messages.get(i))
            .filter(|m| m.role == Role::User)
            .map(|m| (m.text.clone(), m.images.clone(), m.files.clone()));
        let upto = match src.selected {
            Some(i) if draft.is_some() => i,
            Some(i) => i + 1,
            None => src.messages.len(),
        };
        let copy = src.messages[..upto].to_vec();
        let (from, title) = (src.id, format!("{} (branch)", src.title));
        let (choices, preset) = (src.choices.clone(), src.preset.clone());
        let mut cmds = self.open_tab();
        let t = &mut self.tabs[self.active];
        t.title = title;
        for mut m in copy {
            m.versions = None;
            t.push(m);
        }
        t.next_msg = t.messages.iter().map(|m| m.id).max().unwrap_or(0) + 1;
        // The draft keeps its pictures and files, as an edit does.
        if let Some((text, images, files)) = draft {
            t.editor.set(&text);
            (t.attachments, t.files) = (images, files);
        }
        (t.choices, t.preset) = (choices, preset);
        cmds.push(self.configure(&self.tabs[self.active]));
        let t = &self.tabs[self.active];
        cmds.push(Command::Fork {
            tab: t.id,
            from,
            history: exchanges(&t.messages),
        });
        self.flash = Some(format!(
            "copied {upto} messages into a new tab; it shares the cached prefix"
        ));
        self.save(self.active);
        cmds
    }

    /// A click on the transcript selects the message under it.
    pub(super) fn click(&mut self, m: &MouseEvent) {
        if m.kind != MouseEventKind::Down(MouseButton::Left) {
            return;
        }
        let h = self.transcript_height();
        let Some(t) = self.tab_mut() else { return };
        let row = m.row as usize;
        if row < 1 || row > h {
            return;
        }
        let line = t.view_top(t.lines, h) + row - 1;
        if let Some(i) = t.starts.iter().rposition(|&s| s <= line) {
            self.select_at(i);
        }
    }

    fn select_at(&mut self, i: usize) {
        let Some(t) = self.tab_mut() else { return };
        t.selected = Some(i + 1);
        self.select(-1);
    }
}
