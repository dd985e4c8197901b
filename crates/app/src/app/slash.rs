//! Commands typed in the input, in one table ([`COMMANDS`]) that dispatch and the help read
//! (`/rename NAME`, `/copy [N]`, `/think …`, `/system [TEXT]`, `/export [md|json] [PATH]`,
//! `/attach PATH…`, `/detach [N]`, `/image-tokens N`, `/tools …`, `/tool-choice …` (in
//! `tool_cmds`), `/compact`, `/help`) and what they do to the app: copying the last answer or a numbered code block, thinking and the
//! system prompt per tab, exporting the tab, pictures and text files for the next message.

use super::tab::{Message, Role};
use super::{App, Overlay, fences};
use crate::chats::export;
use crate::config::Thinking;
use gemma_protocol::Command;

/// A command typed in the input: its name, its arguments and what it does as the help shows
/// them, and what runs it (`None`: it was refused, the flash says why, and the input keeps it).
pub struct Slash {
    /// Typed after `/`.
    pub name: &'static str,
    /// Its arguments, as the help writes them (empty: none).
    pub args: &'static str,
    /// What it does, in a few words (empty: the name says it).
    pub about: &'static str,
    run: fn(&mut App, &str) -> Option<Vec<Command>>,
}

impl Slash {
    /// `/name args (about)`, as the help and the unknown-command message write it.
    pub fn usage(&self, about: bool) -> String {
        let mut out = format!("/{}", self.name);
        if !self.args.is_empty() {
            out.push(' ');
            out.push_str(self.args);
        }
        if about && !self.about.is_empty() {
            out.push_str(&format!(" ({})", self.about));
        }
        out
    }
}

/// Every command, in the order the help lists them: the one table that dispatch and help read.
pub const COMMANDS: &[Slash] = &[
    Slash {
        name: "rename",
        args: "NAME",
        about: "",
        run: |app, arg| {
            if arg.is_empty() {
                app.flash = Some("/rename NAME: the tab's new name".into());
                return None;
            }
            if let Some(t) = app.tab_mut() {
                t.title = arg.to_string();
            }
            app.save(app.active);
            Some(Vec::new())
        },
    },
    Slash {
        name: "copy",
        args: "[N]",
        about: "code block N",
        run: |app, arg| {
            app.copy(arg.parse().ok());
            Some(Vec::new())
        },
    },
    Slash {
        name: "think",
        args: "off|low|medium|high|unbounded|N",
        about: "",
        run: |app, arg| {
            let on = app.tab().is_some_and(|t| t.choices.thinking.is_on());
            let level = match arg {
                "" if on => Ok(Thinking::Off),
                "" => Ok(Thinking::Medium),
                _ => Thinking::parse(arg),
            };
            match level {
                Ok(level) => Some(app.set_thinking(level)),
                Err(why) => {
                    app.flash = Some(why.replacen("thinking = ", "/think ", 1));
                    None
                }
            }
        },
    },
    Slash {
        name: "system",
        args: "[TEXT]",
        about: "",
        run: |app, arg| Some(app.set_system(Some(arg.to_string()).filter(|a| !a.is_empty()))),
    },
    Slash {
        name: "preset",
        args: "NAME",
        about: "",
        run: |app, arg| Some(app.preset_command(arg)),
    },
    Slash {
        name: "export",
        args: "[md|json] [PATH]",
        about: "this tab to a file",
        run: |app, arg| {
            app.export_tab(arg);
            Some(Vec::new())
        },
    },
    Slash {
        name: "attach",
        args: "PATH…",
        about: "pictures, recordings, text files, globs",
        run: |app, arg| {
            app.attach(arg);
            Some(Vec::new())
        },
    },
    Slash {
        name: "detach",
        args: "[N]",
        about: "",
        run: |app, arg| {
            app.detach(arg);
            Some(Vec::new())
        },
    },
    Slash {
        name: "image-tokens",
        args: "N",
        about: "",
        run: |app, arg| {
            app.set_image_tokens(arg);
            Some(Vec::new())
        },
    },
    Slash {
        name: "tools",
        args: "[on|off|only NAME…]",
        about: "",
        run: |app, arg| Some(app.tools_command(arg)),
    },
    Slash {
        name: "tool-choice",
        args: "auto|required|none",
        about: "",
        run: |app, arg| Some(app.tool_choice_command(arg)),
    },
    Slash {
        name: "compact",
        args: "",
        about: "summarize the older exchanges; the full conversation stays",
        run: |app, _| Some(app.compact()),
    },
    Slash {
        name: "help",
        args: "",
        about: "",
        run: |app, _| {
            app.overlay = Overlay::Help;
            app.help_scroll = 0;
            Some(Vec::new())
        },
    },
];

/// The commands as the help lists them: `Commands: ` then each command's usage, joined by ` · `
/// in lines of at most `width` columns (the later ones indented under the first).
pub fn help_lines(width: usize) -> Vec<String> {
    let lead = "Commands: ";
    let mut lines = vec![lead.to_string()];
    for c in COMMANDS {
        let usage = c.usage(true);
        let last = lines.last_mut().expect("one line at least");
        if last.len() == lead.len() {
            last.push_str(&usage);
        } else if last.chars().count() + 3 + usage.chars().count() <= width {
            last.push_str(" · ");
            last.push_str(&usage);
        } else {
            lines.push(format!("{}{usage}", " ".repeat(lead.len())));
        }
    }
    lines
}

impl App {
    /// A command typed in the input (see [`COMMANDS`]); an unknown one names them all.
    pub(super) fn slash(&mut self, cmd: String) -> Vec<Command> {
        let (name, arg) = cmd.split_once(' ').unwrap_or((cmd.as_str(), ""));
        let arg = arg.trim();
        let Some(c) = COMMANDS.iter().find(|c| c.name == name) else {
            let all: Vec<String> = COMMANDS.iter().map(|c| c.usage(false)).collect();
            self.flash = Some(format!("unknown command /{name}: try {}", all.join(", ")));
            return Vec::new();
        };
        let Some(out) = (c.run)(self, arg) else {
            return Vec::new();
        };
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
        t.set_system(text);
        t.push(Message::new(Role::Notice, note));
        let i = self.active;
        self.save(i);
        vec![self.configure(&self.tabs[i])]
    }

    /// `/export [md|json] [PATH]`: the tab's chat written to PATH (default: its title in the
    /// current directory) by the saver thread.
    pub(super) fn export_tab(&mut self, arg: &str) {
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
        t.choices.thinking = level;
        let note = match level {
            Thinking::Off => "thinking off".to_string(),
            Thinking::Unbounded => "thinking unbounded".to_string(),
            l => format!("thinking {} a turn", l.describe(&budgets)),
        };
        t.push(Message::new(Role::Notice, note));
        let i = self.active;
        vec![self.configure(&self.tabs[i])]
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
