//! Commands typed in the input (`/rename NAME`, `/copy [N]`,
//! `/think off|low|medium|high|unbounded|N`, `/system [TEXT]`, `/export [md|json] [PATH]`,
//! `/attach PATH…`, `/detach [N]`, `/image-tokens N`, `/tools …`, `/tool-choice …` (in
//! `tool_cmds`), `/compact`, `/help`) and
//! what they do to the app: copying the last answer or a numbered code block, thinking and the
//! system prompt per tab, exporting the tab, pictures and text files for the next message.

use super::tab::{Message, Role};
use super::{App, Overlay, fences};
use crate::chats::export;
use crate::config::Thinking;
use gemma_protocol::Command;

impl App {
    /// `/rename NAME`, `/copy [N]`, `/think LEVEL`, `/system [TEXT]`, `/help`, and the others
    /// above.
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
                let on = self.tab().is_some_and(|t| t.thinking.is_on());
                let level = match arg {
                    "" if on => Ok(Thinking::Off),
                    "" => Ok(Thinking::Medium),
                    _ => Thinking::parse(arg),
                };
                match level {
                    Ok(level) => out = self.set_thinking(level),
                    Err(why) => {
                        self.flash = Some(why.replacen("thinking = ", "/think ", 1));
                        return out;
                    }
                }
            }
            "help" => {
                self.overlay = Overlay::Help;
                self.help_scroll = 0;
            }
            "export" => self.export_tab(arg),
            "preset" => out = self.preset_command(arg),
            "system" => out = self.set_system(Some(arg.to_string()).filter(|a| !a.is_empty())),
            "attach" => self.attach(arg),
            "detach" => self.detach(arg),
            "image-tokens" => self.set_image_tokens(arg),
            "tools" => out = self.tools_command(arg),
            "tool-choice" => out = self.tool_choice_command(arg),
            "compact" => out = self.compact(),
            _ => {
                self.flash = Some(format!(
                    "unknown command /{name}: try /rename NAME, /copy [N], \
                     /think off|low|medium|high|unbounded|N, /system [TEXT], /preset NAME, \
                     /export [md|json] [PATH], /attach PATH…, /detach [N], /image-tokens N, \
                     /tools [on|off|only NAME…], \
                     /tool-choice auto|required|none, /compact, /help"
                ));
                return out;
            }
        }
        if let Some(t) = self.tab_mut() {
            t.editor.take();
        }
        out
    }

    /// Sets the tab's system prompt (`None` removes it): shown first in the transcript, sent to
    /// the engine, which rewinds the conversation to its start for the next turn and says so.
    pub(super) fn set_system(&mut self, text: Option<String>) -> Vec<Command> {
        let Some(t) = self.tab_mut() else {
            return Vec::new();
        };
        if t.phase.busy() {
            self.flash = Some("stop the answer first (Esc), then change the system prompt".into());
            return Vec::new();
        }
        if t.system() == text.as_deref() {
            return Vec::new();
        }
        let note = match (&text, t.messages.iter().any(|m| m.role == Role::User)) {
            (Some(_), true) => {
                "system prompt set: the next turn starts the conversation over from it"
            }
            (None, true) => "system prompt removed: the next turn starts the conversation over",
            (Some(_), false) => "system prompt set",
            (None, false) => "system prompt removed",
        };
        t.set_system(text.clone());
        t.push(Message::new(Role::Notice, note));
        let id = t.id;
        let i = self.active;
        self.save(i);
        vec![Command::SetSystem { tab: id, text }]
    }

    /// `/export [md|json] [PATH]`: the tab's chat written to PATH (default: its title in the
    /// current directory) by the saver thread.
    fn export_tab(&mut self, arg: &str) {
        let (format, path) = match arg.split_once(' ') {
            Some((f, p)) => (f, p.trim()),
            None => (arg, ""),
        };
        let (format, path) = match export::Format::parse(format) {
            Some(f) => (f, path),
            // `/export PATH`: Markdown, unless the path says .json.
            None if !format.is_empty() => {
                let f = if arg.ends_with(".json") {
                    export::Format::Json
                } else {
                    export::Format::Markdown
                };
                (f, arg)
            }
            None => (export::Format::Markdown, ""),
        };
        let chat = self.saved(self.active);
        let path = if path.is_empty() {
            // The default name is the tab's title; every run's first tab is "chat 1", so a
            // taken name gets a number instead of replacing an earlier export.
            export::free_name(
                std::path::Path::new(""),
                &export::file_stem(&chat),
                format.extension(),
            )
        } else {
            let p = std::path::PathBuf::from(path);
            if std::fs::symlink_metadata(&p).is_ok() {
                self.flash = Some(format!(
                    "{} exists and is left as it is: /export with a new file name",
                    p.display()
                ));
                return;
            }
            p
        };
        self.flash = Some(format!("exporting to {}", path.display()));
        self.saves.push(crate::chats::SaveJob::Export(
            path,
            export::export(&chat, format),
        ));
    }

    /// The tab's thinking level for its next turns, said in the transcript.
    pub(super) fn set_thinking(&mut self, level: Thinking) -> Vec<Command> {
        let supported = self.model.thinking || !self.model.ready;
        let budgets = self.settings.thinking_budgets;
        let Some(t) = self.tab_mut() else {
            return Vec::new();
        };
        if !supported {
            self.flash = Some("this model has no thinking mode".into());
            return Vec::new();
        }
        t.thinking = level;
        let note = match level {
            Thinking::Off => "thinking off".to_string(),
            Thinking::Unbounded => "thinking unbounded".to_string(),
            l => format!("thinking {} a turn", l.describe(&budgets)),
        };
        t.push(Message::new(Role::Notice, note));
        vec![level.command(t.id, &budgets)]
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
