//! Tabs opened and closed, and a message sent: a new tab set up in the engine (sampling,
//! context, thinking, the default preset), a closed tab archived (and kept for search), and the
//! input sent as a turn (its attached files' blocks before the typed text), or as a new version
//! of an earlier message being edited.

use super::attachments::Chip;
use super::tab::{Message, Phase, Role, Tab};
use super::tab_choices::TabChoices;
use super::{App, chat_tree, persist};
use gemma_protocol::{Command, TabId};

impl App {
    pub(super) fn open_tab(&mut self) -> Vec<Command> {
        let id = self.next_id;
        self.next_id += 1;
        let title = format!("chat {id}");
        let choices = TabChoices::new(&self.settings, self.configured_choice(None));
        let mut tab = Tab::new(id, title, choices);
        tab.uid = Tab::new_uid(id);
        self.tabs.push(tab);
        self.active = self.tabs.len() - 1;
        if let Some(p) = self.default_preset() {
            // Its settings are sent below, with the preset's.
            self.apply_preset(&p, true);
        }
        let t = &self.tabs[self.active];
        vec![
            self.configure(t),
            Command::Attach {
                tab: id,
                chat: t.uid.clone(),
                history: Vec::new(),
                legacy: None,
            },
        ]
    }

    pub(super) fn close_tab(&mut self, id: TabId) -> Vec<Command> {
        if let Some(i) = self.tabs.iter().position(|t| t.id == id) {
            let uid = self.tabs[i].uid.clone();
            if !self.tabs[i].messages.is_empty() {
                let chat = self.saved(i);
                // Written before it is archived: a tab closed mid-turn (its file is from before
                // the turn, or there is none yet) goes to closed/ as it stands.
                let job = crate::chats::SaveJob::Write(uid.clone(), Box::new(chat.clone()));
                self.saves.push(job);
                self.closed.push((uid.clone(), chat));
            }
            self.saves.push(crate::chats::SaveJob::Archive(uid));
        }
        self.tabs.retain(|t| t.id != id);
        self.pending.retain(|c| c.tab() != Some(id));
        let mut cmds = vec![Command::CloseTab { tab: id }];
        if self.tabs.is_empty() {
            cmds.extend(self.open_tab());
        }
        self.active = self.active.min(self.tabs.len() - 1);
        cmds
    }

    /// Why the active tab's message cannot fit its context whatever is made room for: its
    /// pictures, recordings and files, as their chips count them, with its text, past the
    /// context (the engine would refuse it; encoding the media first would only cost minutes).
    fn too_big(&self, text: &str) -> Option<String> {
        let t = self.tab()?;
        let limit = t.choices.context.unwrap_or(self.model.context_limit);
        let needed = t.pending_tokens() + crate::attach::estimate_tokens(text);
        (limit > 0 && t.pending_tokens() > 0 && needed > limit).then(|| {
            format!(
                "this message takes ~{needed} tokens with its attachments, more than the context \
                 holds ({limit}): /detach some, /image-tokens 70 for smaller pictures, or a \
                 longer context_length"
            )
        })
    }

    pub(super) fn submit(&mut self) -> Vec<Command> {
        let Some(t) = self.tabs.get_mut(self.active) else {
            return Vec::new();
        };
        let text = t.editor.text();
        if text.trim().is_empty() && t.attachments.is_empty() && t.files.is_empty() {
            return Vec::new();
        }
        if t.phase.busy() {
            self.flash = Some("a turn is running in this tab: Esc stops it".into());
            return Vec::new();
        }
        if let Some(cmd) = text.trim().strip_prefix('/') {
            return self.slash(cmd.to_string());
        }
        if let Some(why) = self.too_big(&text) {
            // Nothing is sent, nothing is lost: the text and the chips stay in the input.
            self.flash = Some(why);
            return Vec::new();
        }
        let budgets = self.settings.thinking_budgets;
        // The chat as it stands, written with the message before the turn runs: a crash while
        // it waits (a tool's approval, a picture's encoding) gives it back at the next start.
        let mut before = self.saved(self.active);
        let t = &mut self.tabs[self.active];
        let edits = t
            .editing
            .and_then(|i| t.messages.get(i))
            .filter(|m| m.role == Role::User)
            .map(|m| m.id);
        t.turn_started(&budgets);
        // A new version of an earlier message: the path from it on becomes a branch, and the
        // engine follows the path up to its parent before the turn.
        let mut cmds = Vec::new();
        if let Some(i) = t.editing.take()
            && t.messages.get(i).is_some_and(|m| m.role == Role::User)
        {
            t.fork_at(i);
            cmds.push(Command::SetPath {
                tab: t.id,
                history: persist::exchanges(&t.messages),
            });
        }
        t.editor.take();
        t.history.push(text.clone());
        t.recall = None;
        t.failed = false;
        t.phase = Phase::Waiting;
        t.pin = None;
        t.new_output = false;
        let chips = std::mem::take(&mut t.attachments);
        let images = chips.iter().map(Chip::attachment).collect();
        let mut m = Message::new(Role::User, text.trim_end());
        m.images = chips;
        m.files = std::mem::take(&mut t.files);
        // The text the history is rebuilt from later, byte for byte (`persist::exchanges`).
        let text = m.sent();
        before.unsent = Some(chat_tree::unsent(&m, edits));
        let uid = t.uid.clone();
        t.push(m);
        cmds.push(Command::Submit {
            tab: t.id,
            text,
            images,
        });
        self.saves
            .push(crate::chats::SaveJob::Write(uid, Box::new(before)));
        if self.model.ready {
            cmds
        } else {
            self.pending.extend(cmds);
            Vec::new()
        }
    }
}
