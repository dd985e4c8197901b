//! Tool calls in the app: the engine's calls and results onto the answer that made them, the
//! approvals that wait in their tab until the user answers (`y` once, `t` for the tab, `a`
//! always, `n` deny with a note, Esc deny), and "always" saved to the user's config by the
//! saver thread. The overlay itself is drawn by `ui::approval`.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::App;
use super::editor::Editor;
use super::tab::Tab;
use super::tools::{Catalogue, RunState, ToolRun, hard_wrap, pretty_arguments};
use crate::chats::SaveJob;
use crate::config::action::Action;
use gemma_protocol::{Command, ServerInfo, TabId, ToolCall, ToolDecision, ToolInfo, ToolOutcome};

/// The actions that still work while a call waits: moving between tabs, scrolling, reading the
/// help, stopping the turn and quitting. Anything else waits for the answer.
fn passes(a: Action) -> bool {
    matches!(
        a,
        Action::Quit
            | Action::Interrupt
            | Action::NewTab
            | Action::NextTab
            | Action::PrevTab
            | Action::GotoTab(_)
            | Action::Help
            | Action::Search
            | Action::ToggleThoughts
            | Action::CopyAnswer
            | Action::ScrollUp
            | Action::ScrollDown
            | Action::HalfPageUp
            | Action::HalfPageDown
            | Action::ScrollTop
            | Action::ScrollBottom
    )
}

impl Tab {
    /// The message holding call `id` and the call, the newest first.
    pub fn run_mut(&mut self, id: u64) -> Option<(usize, &mut ToolRun)> {
        let i = self
            .messages
            .iter()
            .rposition(|m| m.tools.iter().any(|r| r.id == id))?;
        let run = self.messages[i].tools.iter_mut().find(|r| r.id == id)?;
        Some((i, run))
    }

    /// The turn ended: nothing waits any more, and calls still open were stopped.
    pub fn tools_ended(&mut self) {
        self.approvals.clear();
        self.note = None;
        for i in 0..self.messages.len() {
            let mut changed = false;
            for r in self.messages[i].tools.iter_mut().filter(|r| r.state.open()) {
                r.state = RunState::Stopped;
                changed = true;
            }
            if changed {
                self.touched(i);
            }
        }
    }

    /// The call of the last answer that runs now, if one does.
    pub fn running_tool(&self) -> Option<&ToolRun> {
        let m = self.messages.last()?;
        m.tools.iter().rfind(|r| r.state == RunState::Running)
    }

    /// The call that waits for the user in this tab, if one does.
    pub fn waiting_call(&self) -> Option<&ToolCall> {
        self.approvals.front()
    }
}

impl App {
    /// The arguments of the call waiting in the shown tab as the approval pane shows them: rows
    /// cut to the pane's inner width, at most about half the screen, and how many rows were
    /// left out.
    pub fn approval_args(&self) -> Option<(Vec<String>, usize)> {
        let call = self.tab()?.waiting_call()?;
        let width = (self.size.0 as usize).saturating_sub(4).max(8);
        let mut rows = hard_wrap(&pretty_arguments(&call.arguments), width);
        let most = (self.size.1 as usize / 2).saturating_sub(4).max(2);
        if rows.len() <= most {
            return Some((rows, 0));
        }
        let hidden = rows.len() - (most - 1);
        rows.truncate(most - 1);
        Some((rows, hidden))
    }

    /// Rows of the approval pane, borders included, when a call waits in the shown tab.
    pub fn approval_height(&self) -> Option<u16> {
        let (rows, hidden) = self.approval_args()?;
        Some((rows.len() + usize::from(hidden > 0) + 4) as u16)
    }

    /// The model called a tool in `tab`: the call goes on its answer, and waits for the user
    /// when it needs approval (a tab not shown says so in the tab bar and the status line).
    pub(super) fn tool_call(&mut self, tab: TabId, call: ToolCall, approval: bool) {
        let shown = self.tab().is_some_and(|t| t.id == tab);
        let Some(t) = self.by_id(tab) else { return };
        t.answer().tools.push(ToolRun::new(&call, approval));
        let i = t.messages.len() - 1;
        t.touched(i);
        if !approval {
            return;
        }
        let title = t.title.clone();
        t.approvals.push_back(call.clone());
        if !shown {
            self.flash = Some(format!(
                "“{title}” asks to run {}: go to that tab to answer",
                gemma_protocol::text::short(&call.name, 40)
            ));
        }
    }

    /// A call ended in `tab`: its result goes on its line.
    pub(super) fn tool_result(&mut self, tab: TabId, outcome: ToolOutcome) {
        let Some(t) = self.by_id(tab) else { return };
        if t.approvals.front().is_some_and(|c| c.id == outcome.id) {
            t.note = None;
        }
        t.approvals.retain(|c| c.id != outcome.id);
        if let Some((i, run)) = t.run_mut(outcome.id) {
            run.finish(&outcome);
            t.touched(i);
        }
    }

    /// The engine's catalogue; a server's new error goes to the status line (`/tools` lists
    /// them all).
    pub(super) fn catalogue(&mut self, servers: Vec<ServerInfo>, tools: Vec<ToolInfo>) {
        let old = self.catalogue.take().unwrap_or_default();
        let fresh: Vec<String> = servers
            .iter()
            .filter_map(|s| Some((s, s.error.as_ref()?)))
            .filter(|(s, e)| {
                !old.servers
                    .iter()
                    .any(|o| o.error.as_ref() == Some(e) && o.name == s.name)
            })
            .map(|(s, e)| {
                format!(
                    "tool server {}: {}",
                    s.name,
                    gemma_protocol::text::one_line(e)
                )
            })
            .collect();
        if let Some(last) = fresh.last() {
            self.last_error = Some(last.clone());
        }
        self.catalogue = Some(Catalogue { servers, tools });
    }

    /// Keys while the shown tab has a call waiting: the answer's keys, the note's editing,
    /// and the actions that [`passes`] lets through. `None`: nothing waits, or the key is one of
    /// those actions.
    pub(super) fn approval_key(
        &mut self,
        k: &KeyEvent,
        action: Option<Action>,
    ) -> Option<Vec<Command>> {
        let t = self.tabs.get_mut(self.active)?;
        t.waiting_call()?;
        if let Some(mut note) = t.note.take() {
            match k.code {
                KeyCode::Enter => {
                    let text = note.text().trim().to_string();
                    let note = (!text.is_empty()).then_some(text);
                    return Some(self.decide(ToolDecision::Deny { note }));
                }
                KeyCode::Esc => {}
                _ => {
                    super::keys::edit(&mut note, k);
                    t.note = Some(note);
                }
            }
            return Some(Vec::new());
        }
        let plain = k.modifiers.difference(KeyModifiers::SHIFT).is_empty();
        let decision = match k.code {
            KeyCode::Char('y') if plain => ToolDecision::Once,
            KeyCode::Char('t') if plain => ToolDecision::Tab,
            KeyCode::Char('a') if plain => ToolDecision::Always,
            KeyCode::Esc => ToolDecision::Deny { note: None },
            KeyCode::Char('n') if plain => {
                t.note = Some(Editor::default());
                return Some(Vec::new());
            }
            _ if action.is_some_and(passes) => return None,
            _ => {
                self.flash = Some(
                    "a tool call waits: y once · t this tab · a always · n deny with a note · \
                     Esc deny"
                        .into(),
                );
                return Some(Vec::new());
            }
        };
        Some(self.decide(decision))
    }

    /// Text pasted while the note is open goes into it; false when no note is open.
    pub(super) fn paste_note(&mut self, text: &str) -> bool {
        match self.tabs.get_mut(self.active).and_then(|t| t.note.as_mut()) {
            Some(note) => {
                note.insert(&text.replace(['\n', '\r'], " "));
                true
            }
            None => false,
        }
    }

    /// Answers the shown tab's first waiting call with `decision`.
    fn decide(&mut self, decision: ToolDecision) -> Vec<Command> {
        let Some(t) = self.tabs.get_mut(self.active) else {
            return Vec::new();
        };
        let Some(call) = t.approvals.pop_front() else {
            return Vec::new();
        };
        t.note = None;
        let denied = matches!(decision, ToolDecision::Deny { .. });
        if let Some((i, run)) = t.run_mut(call.id) {
            run.state = if denied {
                RunState::Denied
            } else {
                RunState::Running
            };
            t.touched(i);
        }
        let tab = t.id;
        let name = gemma_protocol::text::short(&call.name, 40);
        self.flash = Some(match &decision {
            ToolDecision::Once => format!("{name} approved once"),
            ToolDecision::Tab => format!("{name} approved in this tab"),
            ToolDecision::Always => self.remember_always(&call),
            ToolDecision::Deny { note: Some(_) } => format!("{name} denied, with your note"),
            ToolDecision::Deny { note: None } => format!("{name} denied"),
        });
        vec![Command::DecideTool {
            tab,
            call: call.id,
            decision,
        }]
    }

    /// "Always" for `call`'s tool: saved to the user's config (by the saver thread) when there
    /// is one; what the status line says.
    fn remember_always(&mut self, call: &ToolCall) -> String {
        let name = gemma_protocol::text::short(&call.name, 40);
        match &self.config_path {
            // Said saved only when the file can take it: a server written inline or in dotted
            // keys cannot, and the status line says so (approved for this run all the same).
            Some(path) => {
                match crate::config::approve::plan_auto_approve(path, &call.server, &call.name) {
                    Ok(Some(_)) => {
                        self.saves.push(SaveJob::AutoApprove {
                            config: path.clone(),
                            server: call.server.clone(),
                            tool: call.name.clone(),
                        });
                        format!("{name} approved from now on (saved to {})", path.display())
                    }
                    Ok(None) => format!(
                        "{name} approved from now on (already listed in {})",
                        path.display()
                    ),
                    Err(e) => format!("{name} approved until the app ends: {e}"),
                }
            }
            None => format!(
                "{name} approved until the app ends (there is no config file to save it in)"
            ),
        }
    }
}
