//! Key handling for [`App`]: popups first, then the keymap's actions, then the input editor.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::editor::Editor;
use super::{App, Overlay};
use crate::config::Thinking;
use crate::config::action::Action;
use crate::config::keymap::Chord;
use gemma_protocol::Command;

impl App {
    pub(super) fn key(&mut self, k: KeyEvent) -> Vec<Command> {
        if k.kind == KeyEventKind::Release {
            return Vec::new();
        }
        self.flash = None;
        let action = self.keymap.action(&k);
        if action != Some(Action::Interrupt) && action != Some(Action::Quit) {
            self.quit_armed = false;
        }
        match std::mem::replace(&mut self.overlay, Overlay::None) {
            Overlay::None => {}
            Overlay::Help => {
                // Up/Down scroll it; any other key closes it, and a quit still quits.
                let step = match k.code {
                    KeyCode::Up => -1,
                    KeyCode::Down => 1,
                    KeyCode::PageUp => -10,
                    KeyCode::PageDown => 10,
                    _ => 0,
                };
                if step != 0 {
                    let scroll = self.help_scroll as i32 + step;
                    self.help_scroll = scroll.clamp(0, 200) as u16;
                    self.overlay = Overlay::Help;
                } else if action == Some(Action::Quit) {
                    self.quit = true;
                }
                return Vec::new();
            }
            Overlay::ConfirmClose(id) => {
                return match k.code {
                    KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => {
                        let mut cmds = vec![Command::Cancel { tab: id }];
                        cmds.extend(self.close_tab(id));
                        cmds
                    }
                    _ => Vec::new(),
                };
            }
            Overlay::Settings(e) => return self.settings_key(e, &k),
            Overlay::Search(s) => return self.search_key(s, &k),
            Overlay::Rename(mut e) => {
                match k.code {
                    KeyCode::Enter => {
                        let name = e.text().trim().to_string();
                        if let (false, Some(t)) = (name.is_empty(), self.tab_mut()) {
                            t.title = name;
                            self.save(self.active);
                        }
                    }
                    KeyCode::Esc => {}
                    _ => {
                        edit(&mut e, &k);
                        self.overlay = Overlay::Rename(e);
                    }
                }
                return Vec::new();
            }
        }
        if let Some(cmds) = self.approval_key(&k, action) {
            return cmds;
        }
        if let Some(cmds) = self.selection_key(&k) {
            return cmds;
        }
        let input_empty = self.tab().is_none_or(|t| t.editor.is_empty());
        let owned_by_input = Chord::of(&k).belongs_to_input() && !input_empty;
        match action.filter(|_| !owned_by_input) {
            Some(a) => self.act(a),
            None => {
                self.type_key(&k);
                Vec::new()
            }
        }
    }

    fn act(&mut self, a: Action) -> Vec<Command> {
        let busy = self.tab().is_some_and(|t| t.phase.busy());
        let id = self.tab().map(|t| t.id);
        match a {
            Action::Quit => self.quit = true,
            Action::Interrupt => return self.interrupt(busy),
            Action::NewTab => return self.open_tab(),
            Action::CloseTab => {
                if let Some(id) = id {
                    if busy {
                        self.overlay = Overlay::ConfirmClose(id);
                    } else {
                        return self.close_tab(id);
                    }
                }
            }
            Action::NextTab | Action::PrevTab | Action::GotoTab(_) => self.go_to_tab(a),
            Action::RenameTab => {
                let mut e = Editor::default();
                e.set(self.tab().map_or("", |t| t.title.as_str()));
                self.overlay = Overlay::Rename(e);
            }
            Action::Send => return self.submit(),
            Action::Newline => {
                if let Some(t) = self.tab_mut() {
                    t.editor.newline();
                }
            }
            Action::Stop => {
                if !busy {
                    self.cancel_edit();
                }
                return self.stop();
            }
            Action::Regenerate => return self.regenerate(),
            Action::SelectPrev => self.select(-1),
            Action::SelectNext => self.select(1),
            Action::PrevVersion => return self.cycle(self.tab().and_then(|t| t.selected), -1),
            Action::NextVersion => return self.cycle(self.tab().and_then(|t| t.selected), 1),
            Action::BranchTab => return self.branch_tab(),
            Action::CopyAnswer => self.copy(None),
            Action::ToggleThoughts => self.show_thoughts = !self.show_thoughts,
            Action::ToggleThinking => {
                let on = self.tab().is_some_and(|t| t.choices.thinking.is_on());
                return self.set_thinking(if on { Thinking::Off } else { Thinking::Medium });
            }
            Action::CycleThinking => {
                let level = self.tab().map_or(Thinking::Off, |t| t.choices.thinking);
                return self.set_thinking(level.next(&self.settings.thinking_budgets));
            }
            Action::Record => self.toggle_recording(),
            Action::Help => {
                self.overlay = Overlay::Help;
                self.help_scroll = 0;
            }
            Action::Search => self.open_search(),
            Action::Settings => {
                if let Some(t) = self.tab() {
                    self.overlay = Overlay::Settings(super::settings::SettingsEdit {
                        field: 0,
                        layer: t.choices.sampling,
                    });
                }
            }
            Action::ScrollUp
            | Action::ScrollDown
            | Action::HalfPageUp
            | Action::HalfPageDown
            | Action::ScrollTop
            | Action::ScrollBottom => self.scroll_by(a),
        }
        Vec::new()
    }

    /// Ctrl+C: stops a running answer, else clears the input, else quits when pressed twice.
    fn interrupt(&mut self, busy: bool) -> Vec<Command> {
        if busy {
            return self.stop();
        }
        if self.tab().is_some_and(|t| !t.editor.is_empty()) {
            if let Some(t) = self.tab_mut() {
                t.editor.take();
            }
        } else if self.quit_armed {
            self.quit = true;
        } else {
            self.quit_armed = true;
            self.flash = Some("press Ctrl+C again to quit".into());
        }
        Vec::new()
    }

    /// The next, previous or numbered tab.
    fn go_to_tab(&mut self, a: Action) {
        let n = self.tabs.len().max(1);
        match a {
            Action::NextTab => self.active = (self.active + 1) % n,
            Action::PrevTab => self.active = (self.active + n - 1) % n,
            Action::GotoTab(k) if (k as usize) <= self.tabs.len() && k > 0 => {
                self.active = k as usize - 1
            }
            _ => {}
        }
    }

    /// A page, half a page, or to either end of the transcript.
    fn scroll_by(&mut self, a: Action) {
        let h = self.transcript_height() as isize;
        let by = match a {
            Action::ScrollUp => -h.max(1) + 1,
            Action::ScrollDown => (h - 1).max(1),
            Action::HalfPageUp => -(h / 2).max(1),
            Action::HalfPageDown => (h / 2).max(1),
            Action::ScrollTop => isize::MIN / 2,
            _ => isize::MAX / 2,
        };
        self.scroll(by);
    }

    fn stop(&mut self) -> Vec<Command> {
        match self.tab() {
            Some(t) if t.phase.busy() => vec![Command::Cancel { tab: t.id }],
            _ => Vec::new(),
        }
    }

    fn scroll(&mut self, delta: isize) {
        let h = self.transcript_height();
        if let Some(t) = self.tab_mut() {
            t.scroll(delta, h);
        }
    }

    /// Keys for the input: editing, and Up/Down history recall at the first/last line.
    fn type_key(&mut self, k: &KeyEvent) {
        let Some(t) = self.tab_mut() else { return };
        match k.code {
            KeyCode::Up if !t.editor.up() => {
                if t.history.is_empty() {
                    return;
                }
                let i = t
                    .recall
                    .map_or(t.history.len() - 1, |i| i.saturating_sub(1));
                t.recall = Some(i);
                let text = t.history[i].clone();
                t.editor.set(&text);
            }
            KeyCode::Down if !t.editor.down() => {
                if let Some(i) = t.recall {
                    if i + 1 < t.history.len() {
                        t.recall = Some(i + 1);
                        let text = t.history[i + 1].clone();
                        t.editor.set(&text);
                    } else {
                        t.recall = None;
                        t.editor.take();
                    }
                }
            }
            KeyCode::Up | KeyCode::Down => {}
            _ => edit(&mut t.editor, k),
        }
    }
}

/// The editing keys of a text field.
pub(super) fn edit(e: &mut Editor, k: &KeyEvent) {
    let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
    match k.code {
        KeyCode::Char('a') if ctrl => e.home(),
        KeyCode::Char('e') if ctrl => e.end(),
        KeyCode::Char('u') if ctrl => e.kill_to_start(),
        KeyCode::Char(_) if ctrl || k.modifiers.contains(KeyModifiers::ALT) => {}
        KeyCode::Char(c) => e.insert(&c.to_string()),
        KeyCode::Backspace => e.backspace(),
        KeyCode::Delete => e.delete(),
        KeyCode::Left => e.left(),
        KeyCode::Right => e.right(),
        KeyCode::Home => e.home(),
        KeyCode::End => e.end(),
        KeyCode::Enter => e.newline(),
        _ => {}
    }
}
