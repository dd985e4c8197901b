//! Commands typed in the input (`/rename NAME`, `/copy [N]`, `/think on|off`, `/help`) and what
//! they do to the app: copying the last answer or a numbered code block, thinking per tab.

use super::tab::{Message, Role};
use super::{App, Overlay, fences};
use crate::engine::protocol::Command;

impl App {
    /// `/rename NAME`, `/copy [N]`, `/think on|off`, `/help`.
    pub(super) fn slash(&mut self, cmd: String) -> Vec<Command> {
        let (name, arg) = cmd.split_once(' ').unwrap_or((cmd.as_str(), ""));
        let arg = arg.trim();
        let mut out = Vec::new();
        match name {
            "rename" if !arg.is_empty() => {
                if let Some(t) = self.tab_mut() {
                    t.title = arg.to_string();
                }
                self.save(self.active);
            }
            "copy" => self.copy(arg.parse().ok()),
            "think" => {
                let on = match arg {
                    "on" => true,
                    "off" => false,
                    _ => !self.tab().is_some_and(|t| t.thinking),
                };
                out = self.set_thinking(on);
            }
            "help" => self.overlay = Overlay::Help,
            _ => {
                self.flash = Some(format!(
                    "unknown command /{name}: try /rename NAME, /copy [N], /think on|off, /help"
                ));
                return out;
            }
        }
        if let Some(t) = self.tab_mut() {
            t.editor.take();
        }
        out
    }

    pub(super) fn set_thinking(&mut self, on: bool) -> Vec<Command> {
        let supported = self.model.thinking || !self.model.ready;
        let Some(t) = self.tab_mut() else {
            return Vec::new();
        };
        if !supported {
            self.flash = Some("this model has no thinking mode".into());
            return Vec::new();
        }
        t.thinking = on;
        let note = if on { "thinking on" } else { "thinking off" };
        t.push(Message::new(Role::Notice, note));
        vec![Command::SetThinking { tab: t.id, on }]
    }

    /// Copies the last answer, or code block `n` of the tab.
    pub(super) fn copy(&mut self, n: Option<usize>) {
        let Some(t) = self.tab() else { return };
        let text = match n {
            None => t.last_answer().map(String::from),
            Some(n) => {
                let mut seen = 0;
                let mut found = None;
                for m in t.messages.iter().filter(|m| m.role == Role::Model) {
                    let here = fences::count_fences(&m.text);
                    if n > seen && n <= seen + here {
                        found = fences::code_block(&m.text, n - seen);
                        break;
                    }
                    seen += here;
                }
                found
            }
        };
        match text {
            Some(text) => {
                self.flash = Some(match n {
                    Some(n) => format!("copied code block {n}"),
                    None => "copied the last answer".into(),
                });
                self.clipboard = Some(text);
            }
            None => self.flash = Some("nothing to copy".into()),
        }
    }
}
