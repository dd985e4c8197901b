//! The app's side of saved chats: a tab handed to the saver thread as its chat file
//! ([`crate::chats`] writes it atomically, off the UI thread), and saved chats restored as tabs
//! at start, each attached to the engine's conversation of the same name with
//! [`Command::Attach`] (the conversation in token ids is the engine's); the exchanges the engine
//! rebuilds a conversation from.

use super::App;
use super::chat_tree;
use super::tab::{Message, Role, Tab};
use crate::chats::{SaveJob, SavedChat};
use gemma_protocol::{Command, Exchange, LegacyConvo};

/// A transcript's exchanges, for the engine: each user message with the model's answer after it
/// (empty when none came); notices and errors are not part of the conversation.
pub fn exchanges(messages: &[Message]) -> Vec<Exchange> {
    let mut out: Vec<Exchange> = Vec::new();
    for m in messages {
        match m.role {
            // As it was sent: its files' blocks before its text.
            Role::User => out.push(Exchange {
                user: m.sent(),
                media: m.images.iter().map(|c| c.attachment()).collect(),
                ..Exchange::default()
            }),
            Role::Model => {
                if let Some(last) = out.last_mut() {
                    // A second answer to one message goes on after the first: its calls'
                    // places and hand-overs follow the first's.
                    let (shift, next) = (
                        last.answer.len(),
                        last.calls.last().map_or(0, |c| c.handover + 1),
                    );
                    last.answer.push_str(&m.text);
                    last.calls.extend(m.tools.iter().map(|r| {
                        let mut c = r.made();
                        c.at += shift;
                        c.handover += next;
                        c
                    }));
                }
            }
            Role::Notice | Role::Error | Role::System => {}
        }
    }
    out
}

impl App {
    /// A tab as it is saved.
    pub fn saved(&self, i: usize) -> SavedChat {
        let t = &self.tabs[i];
        let mut chat = chat_tree::saved_tree(t);
        chat.order = i;
        chat.title = t.title.clone();
        chat.model = self.model.name.clone();
        chat.set_level(t.choices.thinking);
        chat
    }

    /// Queues a save of tab `i`; a tab with nothing in it leaves no file (it would come back
    /// empty at every start).
    pub(super) fn save(&mut self, i: usize) {
        let Some(t) = self.tabs.get(i) else { return };
        let job = if t.messages.is_empty() {
            SaveJob::Remove(t.uid.clone())
        } else {
            SaveJob::Write(t.uid.clone(), Box::new(self.saved(i)))
        };
        self.saves.push(job);
    }

    /// Queues a save of every tab (on quit, and when tabs moved).
    pub fn save_all(&mut self) {
        for i in 0..self.tabs.len() {
            self.save(i);
        }
    }

    /// The saves queued since the last call.
    pub fn take_saves(&mut self) -> Vec<SaveJob> {
        std::mem::take(&mut self.saves)
    }

    /// Replaces the start-up tab with saved chats (when there are any); returns the commands
    /// that set the restored tabs up in the engine. `warnings` become notices.
    pub fn restore(
        &mut self,
        mut chats: Vec<(String, SavedChat)>,
        warnings: Vec<String>,
    ) -> Vec<Command> {
        let mut cmds = Vec::new();
        chats.sort_by_key(|(_, c)| c.order);
        // Empty chats (saved by earlier releases) are not brought back.
        chats.retain(|(_, c)| !c.messages.is_empty() || c.unsent.is_some());
        if !chats.is_empty() {
            for t in &self.tabs {
                cmds.push(Command::CloseTab { tab: t.id });
            }
            self.tabs.clear();
        }
        for (uid, chat) in chats {
            cmds.extend(self.restore_one(uid, chat));
        }
        self.active = 0;
        if let Some(t) = self.tabs.first_mut() {
            for w in warnings {
                t.push(Message::new(Role::Error, w));
            }
        }
        cmds
    }

    /// Opens saved chat `chat` (file name `uid`) as a new tab, the active one; returns the
    /// commands that set it up in the engine.
    pub(super) fn restore_one(&mut self, uid: String, chat: SavedChat) -> Vec<Command> {
        let mut cmds = Vec::new();
        cmds.extend(self.open_tab());
        let same_model = chat.model == self.model.name;
        let level = chat.level();
        let t = self.tabs.last_mut().expect("just opened");
        t.uid = uid;
        t.title = chat.title;
        t.choices.thinking = level;
        let (messages, branches) = chat_tree::tree(chat.messages, chat.branches);
        t.messages = messages;
        t.branches = branches;
        t.next_msg = t.all_messages().map(|m| m.id).max().unwrap_or(0) + 1;
        if let Some(s) = chat.sampling {
            t.choices.sampling = s.layer();
            t.choices.max_new_tokens = s.max_new_tokens;
            t.preset = s.preset;
        }
        if let Some(saved) = &chat.tools {
            (t.choices.tools, t.choices.tool_choice) = chat_tree::tools_of(saved);
        }
        for i in 0..t.messages.len() {
            t.touched(i);
        }
        // A system prompt anywhere but first is not one (a hand-edited file).
        if let Some(i) = t
            .messages
            .iter()
            .skip(1)
            .position(|m| m.role == Role::System)
        {
            t.messages[i + 1].role = Role::Notice;
        }
        t.refresh_versions();
        if let Some(u) = chat.unsent {
            back_to_editor(t, u);
        }
        cmds.push(self.configure(&self.tabs[self.tabs.len() - 1]));
        let t = self.tabs.last_mut().expect("just opened");
        // The engine brings the conversation back: its own saved ids, else (a chat of an
        // earlier release) the ids the file held, else the transcript's text.
        let legacy = (same_model && !chat.ids.is_empty()).then(|| LegacyConvo {
            ids: chat.ids.clone(),
            header: chat.header,
            last_answer: chat.last_answer,
        });
        if !same_model && !t.messages.is_empty() {
            t.push(Message::new(
                Role::Notice,
                format!(
                    "this chat was made with {}; {} reads it from its text, so your next \
                     message prefills it",
                    chat.model, self.model.name
                ),
            ));
        }
        cmds.push(Command::Attach {
            tab: t.id,
            chat: t.uid.clone(),
            history: exchanges(&t.messages),
            legacy,
        });
        cmds
    }
}

/// A message whose turn never ended (gemma-chat was killed while it ran) goes back to the
/// editor with its pictures and files, as the edit it was when it was one, and the tab says so.
fn back_to_editor(t: &mut Tab, u: crate::chats::Unsent) {
    let edits = u.edits;
    let m = chat_tree::unsent_message(u);
    t.editor.set(&m.text);
    t.attachments = m.images;
    t.files = m.files;
    t.editing = edits.and_then(|id| {
        t.messages
            .iter()
            .position(|m| m.id == id && m.role == Role::User)
    });
    t.push(Message::new(
        Role::Notice,
        "your last message had no answer when gemma-chat stopped: it is back in the editor \
         (Enter sends it)",
    ));
}

impl Tab {
    /// A fresh file name for a new tab.
    pub fn new_uid(id: u64) -> String {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("chat-{ms}-{id}")
    }
}
