//! `/tools` (the engine's servers, with their errors, and tools, marked where the tab declares
//! them; `/tools on|off|only NAME…` chooses them for the tab) and `/tool-choice
//! auto|required|none`, each told to the engine with the tab's settings.

use super::App;
use super::tab::{Message, Role};
use super::tools::Catalogue;
use gemma_protocol::text::{one_line, short};
use gemma_protocol::{Command, ToolChoice, ToolSelection};

/// What the tab declares, in words.
fn selection_text(s: &ToolSelection) -> String {
    match s {
        ToolSelection::All => "all".into(),
        ToolSelection::Off => "off".into(),
        ToolSelection::Only(names) => format!("only {}", names.join(" ")),
    }
}

/// The catalogue as `/tools` lists it for a tab declaring `sel`.
pub fn listing(c: Option<&Catalogue>, sel: &ToolSelection, choice: ToolChoice) -> String {
    let mut out = format!(
        "tools in this tab: {} · tool choice {}\n",
        selection_text(sel),
        choice.as_str()
    );
    match c {
        None => out.push_str("the engine has not listed its tools yet\n"),
        Some(c) if c.servers.is_empty() => out.push_str(
            "no tool servers: add [mcp.servers.NAME] or turn on a built-in in [tools] \
             (`gemma-chat config path` shows the file)\n",
        ),
        Some(c) => {
            for s in &c.servers {
                let name = one_line(&s.name);
                match &s.error {
                    Some(e) => out.push_str(&format!(
                        "✗ {name} ({}, {}): {}\n",
                        one_line(&s.transport),
                        one_line(&s.state),
                        one_line(e)
                    )),
                    None => out.push_str(&format!(
                        "{name} ({}, {}): {} tool{}\n",
                        one_line(&s.transport),
                        one_line(&s.state),
                        s.tools.len(),
                        if s.tools.len() == 1 { "" } else { "s" }
                    )),
                }
                for t in c.tools.iter().filter(|t| t.server == s.name) {
                    let mark = if sel.includes(&t.server, &t.name) {
                        "✓"
                    } else {
                        "·"
                    };
                    let auto = if t.auto_approve {
                        " (runs without asking)"
                    } else {
                        ""
                    };
                    out.push_str(&format!(
                        "  {mark} {}{auto} — {}\n",
                        one_line(&t.name),
                        short(&t.description, 60)
                    ));
                }
            }
        }
    }
    out.push_str("/tools on · /tools off · /tools only NAME… · /tool-choice auto|required|none");
    out
}

impl App {
    /// `/tools [on|off|only NAME…]`: lists the tools, or chooses the tab's.
    pub(super) fn tools_command(&mut self, arg: &str) -> Vec<Command> {
        let mut words = arg.split_whitespace();
        let selection = match words.next() {
            None => {
                let text = self.tab().map(|t| {
                    listing(
                        self.catalogue.as_ref(),
                        &t.choices.tools,
                        t.choices.tool_choice,
                    )
                });
                if let (Some(text), Some(t)) = (text, self.tab_mut()) {
                    t.push(Message::new(Role::Notice, text));
                }
                return Vec::new();
            }
            Some("on" | "all") => ToolSelection::All,
            Some("off" | "none") => ToolSelection::Off,
            Some("only") => {
                let names: Vec<String> = words.map(String::from).collect();
                if names.is_empty() {
                    self.flash = Some("/tools only NAME…: a server or server.tool each".into());
                    return Vec::new();
                }
                let unknown: Vec<&str> = match &self.catalogue {
                    Some(c) => names
                        .iter()
                        .filter(|n| !c.knows(n))
                        .map(|n| n.as_str())
                        .collect(),
                    None => Vec::new(),
                };
                if !unknown.is_empty() {
                    self.flash = Some(format!(
                        "no server or server.tool named {}: /tools lists them",
                        short(&unknown.join(", "), 60)
                    ));
                    return Vec::new();
                }
                ToolSelection::Only(names)
            }
            Some(other) => {
                self.flash = Some(format!(
                    "/tools {}: try /tools, /tools on, /tools off or /tools only NAME…",
                    short(other, 30)
                ));
                return Vec::new();
            }
        };
        self.change_tools(Some(selection), None)
    }

    /// `/tool-choice auto|required|none` for the tab.
    pub(super) fn tool_choice_command(&mut self, arg: &str) -> Vec<Command> {
        match ToolChoice::parse(arg) {
            Some(choice) => self.change_tools(None, Some(choice)),
            None => {
                let now = self
                    .tab()
                    .map_or("auto", |t| t.choices.tool_choice.as_str());
                self.flash = Some(format!(
                    "tool choice {now}; /tool-choice auto|required|none changes it"
                ));
                Vec::new()
            }
        }
    }

    /// Gives the active tab `selection` and `choice` (`None`: unchanged), says so and tells the
    /// engine; refused while a turn runs.
    fn change_tools(
        &mut self,
        selection: Option<ToolSelection>,
        choice: Option<ToolChoice>,
    ) -> Vec<Command> {
        let i = self.active;
        let Some(t) = self.tabs.get_mut(i) else {
            return Vec::new();
        };
        if t.phase.busy() {
            self.flash = Some("stop the answer first (Esc), then change the tools".into());
            return Vec::new();
        }
        if let Some(s) = selection {
            t.choices.tools = s;
        }
        if let Some(c) = choice {
            t.choices.tool_choice = c;
        }
        self.flash = Some(format!(
            "tools: {} · tool choice {}",
            selection_text(&t.choices.tools),
            t.choices.tool_choice.as_str()
        ));
        let cmd = self.configure(&self.tabs[i]);
        self.save(i);
        vec![cmd]
    }

    /// The config's tool choice for the tabs opened before the config was set (the first tab):
    /// `[tools] choice` where it is not `auto` (a default preset applied after wins).
    pub fn apply_default_tools(&mut self) -> Vec<Command> {
        let choice = self.configured_choice(None);
        let mut changed = Vec::new();
        for (i, t) in self.tabs.iter_mut().enumerate() {
            if t.choices.tool_choice != choice {
                t.choices.tool_choice = choice;
                changed.push(i);
            }
        }
        changed
            .into_iter()
            .map(|i| self.configure(&self.tabs[i]))
            .collect()
    }

    /// The tool choice a new tab (or one taking `preset`) starts with, from the config.
    pub(super) fn configured_choice(&self, preset: Option<&str>) -> ToolChoice {
        self.config
            .as_ref()
            .map_or(ToolChoice::Auto, |c| c.tool_choice(preset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemma_protocol::{ServerInfo, ToolInfo};

    #[test]
    fn the_listing_names_servers_errors_and_the_tabs_tools() {
        let c = Catalogue {
            servers: vec![
                ServerInfo {
                    name: "files".into(),
                    transport: "stdio".into(),
                    state: "ready".into(),
                    tools: vec!["read".into(), "write".into()],
                    error: None,
                },
                ServerInfo {
                    name: "web".into(),
                    transport: "http".into(),
                    state: "failed".into(),
                    tools: Vec::new(),
                    error: Some("exited: status 1\n(stderr: boom)".into()),
                },
            ],
            tools: ["read", "write"]
                .map(|n| ToolInfo {
                    name: n.into(),
                    server: "files".into(),
                    description: format!("{n}s a file"),
                    parameters: "{}".into(),
                    auto_approve: n == "read",
                })
                .to_vec(),
        };
        let sel = ToolSelection::Only(vec!["files.read".into()]);
        assert_eq!(
            listing(Some(&c), &sel, ToolChoice::Required),
            "tools in this tab: only files.read · tool choice required\n\
             files (stdio, ready): 2 tools\n  ✓ read (runs without asking) — reads a file\n  · write — writes a \
             file\n✗ web (http, failed): exited: status 1 (stderr: boom)\n\
             /tools on · /tools off · /tools only NAME… · /tool-choice auto|required|none"
        );
        assert!(c.knows("files") && c.knows("files.write") && !c.knows("files.nope"));
    }
}
