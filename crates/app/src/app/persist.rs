//! Chats on disk: each tab's transcript, one JSON file per tab in the data dir's `chats/` (the
//! conversation in token ids is the engine's, saved under the same name: the app attaches each
//! restored tab to it with [`Command::Attach`]). Files are written atomically (temp file, fsync,
//! rename) by the saver thread ([`saver`]), so saving never blocks the UI and a crash never loses
//! a finished turn. At start the files come back as tabs; a damaged one is moved aside, never
//! deleted, with a warning.

use std::path::Path;

use super::App;
use super::chat_file;
use super::tab::{Message, Role, Tab};
use gemma_protocol::{Command, Exchange, LegacyConvo};

pub use super::chat_file::{SavedBranch, SavedChat, SavedMessage, SavedStats, VERSION};

/// A transcript's exchanges, for the engine: each user message with the model's answer after it
/// (empty when none came); notices and errors are not part of the conversation.
pub fn exchanges(messages: &[Message]) -> Vec<Exchange> {
    let mut out: Vec<Exchange> = Vec::new();
    for m in messages {
        match m.role {
            Role::User => out.push(Exchange {
                user: m.text.clone(),
                answer: String::new(),
            }),
            Role::Model => {
                if let Some(last) = out.last_mut() {
                    last.answer.push_str(&m.text);
                }
            }
            Role::Notice | Role::Error | Role::System => {}
        }
    }
    out
}

pub use super::saver::{SaveJob, saver};

impl App {
    /// A tab as it is saved.
    pub fn saved(&self, i: usize) -> SavedChat {
        let t = &self.tabs[i];
        let mut chat = chat_file::saved_tree(t);
        chat.order = i;
        chat.title = t.title.clone();
        chat.model = self.model.name.clone();
        chat.thinking = t.thinking;
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
        chats.retain(|(_, c)| !c.messages.is_empty());
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
        let t = self.tabs.last_mut().expect("just opened");
        t.uid = uid;
        t.title = chat.title;
        if t.thinking != chat.thinking {
            t.thinking = chat.thinking;
            cmds.push(Command::SetThinking {
                tab: t.id,
                on: chat.thinking,
            });
        }
        let (messages, branches) = chat_file::tree(chat.messages, chat.branches);
        t.messages = messages;
        t.branches = branches;
        t.next_msg = t.all_messages().map(|m| m.id).max().unwrap_or(0) + 1;
        if let Some(s) = chat.sampling {
            t.overrides = s.layer();
            t.max_new_tokens = s.max_new_tokens;
            t.preset = s.preset;
            cmds.push(self.sampling_command(&self.tabs[self.tabs.len() - 1]));
        }
        let t = self.tabs.last_mut().expect("just opened");
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
        if let Some(system) = t.system() {
            cmds.push(Command::SetSystem {
                tab: t.id,
                text: Some(system.to_string()),
            });
        }
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

impl Tab {
    /// A fresh file name for a new tab.
    pub fn new_uid(id: u64) -> String {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("chat-{ms}-{id}")
    }
}

/// Removes closed tabs' chats (in `dir/closed/`) last written more than `days` days ago (0:
/// none); how many went.
pub fn prune_closed(dir: &Path, days: u64) -> usize {
    if days == 0 {
        return 0;
    }
    let keep = std::time::Duration::from_secs(days.saturating_mul(86_400));
    let Ok(entries) = std::fs::read_dir(dir.join("closed")) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > keep)
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// The closed tabs' chats in `dir/closed/` (for search), those that read.
pub fn load_closed(dir: &Path) -> Vec<(String, SavedChat)> {
    let Ok(entries) = std::fs::read_dir(dir.join("closed")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let uid = p.file_stem()?.to_string_lossy().into_owned();
            let chat: SavedChat = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
            ((2..=VERSION).contains(&chat.version) && !chat.messages.is_empty())
                .then_some((uid, chat))
        })
        .collect()
}

/// Reads every chat in `dir`. A file that cannot be read or parsed is moved to `damaged/`
/// (never deleted) and named in a warning.
pub fn load_chats(dir: &Path) -> (Vec<(String, SavedChat)>, Vec<String>) {
    let mut chats = Vec::new();
    let mut warnings = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (chats, warnings);
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Some(uid) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<SavedChat>(&t).map_err(|e| e.to_string()))
            .and_then(|c| {
                if (2..=VERSION).contains(&c.version) {
                    Ok(c)
                } else {
                    Err(format!(
                        "format version {} is not one this release reads (2 to {VERSION})",
                        c.version
                    ))
                }
            });
        match parsed {
            Ok(c) => chats.push((uid, c)),
            Err(why) => {
                let aside = dir.join("damaged");
                let to = aside.join(path.file_name().unwrap_or_default());
                let moved = gemma_files::create_private_dir(&aside)
                    .and_then(|_| std::fs::rename(&path, &to));
                warnings.push(match moved {
                    Ok(()) => format!(
                        "a saved chat could not be read ({why}); it was moved to {}",
                        to.display()
                    ),
                    Err(e) => format!(
                        "a saved chat could not be read ({why}) nor moved aside ({e}): {}",
                        path.display()
                    ),
                });
            }
        }
    }
    (chats, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemma_files::write_atomic;

    #[test]
    fn atomic_writes_and_damaged_files_moved_aside() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = SavedChat {
            version: VERSION,
            order: 0,
            title: "t".into(),
            model: "m".into(),
            thinking: false,
            messages: vec![SavedMessage::new("user", "hi")],
            ids: vec![2, 5],
            ..SavedChat::default()
        };
        let bytes = serde_json::to_vec(&good).expect("json");
        write_atomic(&dir.path().join("a.json"), &bytes).expect("write");
        std::fs::write(dir.path().join("b.json"), b"{ not json").expect("write");
        let (chats, warnings) = load_chats(dir.path());
        assert_eq!(chats, vec![("a".to_string(), good)]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            dir.path().join("damaged/b.json").exists(),
            "moved aside, not deleted"
        );
        assert!(!dir.path().join("a.tmp").exists());
    }

    /// A save that fails is reported, and the saver says so when it ends (quit turns it into
    /// an error on stderr and a non-zero exit).
    #[test]
    fn failed_saves_are_reported() {
        let dir = tempfile::tempdir().expect("tmp");
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"x").expect("write");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let (tx, handle) = saver(not_a_dir, move |e| seen2.lock().expect("lock").push(e));
        let chat = SavedChat {
            version: VERSION,
            order: 0,
            title: "t".into(),
            model: "m".into(),
            thinking: false,
            ..SavedChat::default()
        };
        tx.send(SaveJob::Write("a".into(), Box::new(chat)))
            .expect("send");
        drop(tx);
        let failed = handle.join().expect("saver");
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(seen.lock().expect("lock").len(), 1);
    }

    /// A closed chat moves to `closed/`, is found there for search, and moves back when reopened.
    #[test]
    fn closed_chats_are_found_and_reopened() {
        let dir = tempfile::tempdir().expect("tmp");
        let chat = SavedChat {
            version: VERSION,
            messages: vec![SavedMessage::new("user", "hi")],
            ..SavedChat::default()
        };
        let (tx, handle) = saver(dir.path().to_path_buf(), |_| {});
        tx.send(SaveJob::Write("a".into(), Box::new(chat.clone())))
            .expect("send");
        tx.send(SaveJob::Archive("a".into())).expect("send");
        drop(tx);
        assert!(handle.join().expect("saver").is_empty());
        assert!(!dir.path().join("a.json").exists());
        assert_eq!(load_closed(dir.path()), vec![("a".to_string(), chat)]);
        let (tx, handle) = saver(dir.path().to_path_buf(), |_| {});
        tx.send(SaveJob::Reopen("a".into())).expect("send");
        drop(tx);
        assert!(handle.join().expect("saver").is_empty());
        assert!(dir.path().join("a.json").exists());
        assert!(load_closed(dir.path()).is_empty());
    }

    #[test]
    fn closed_chats_older_than_the_limit_are_pruned() {
        let dir = tempfile::tempdir().expect("tmp");
        let closed = dir.path().join("closed");
        std::fs::create_dir_all(&closed).expect("dir");
        let old = closed.join("old.json");
        let new = closed.join("new.json");
        std::fs::write(&old, b"{}").expect("write");
        std::fs::write(&new, b"{}").expect("write");
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(40 * 86_400);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .and_then(|f| f.set_modified(long_ago))
            .expect("mtime");
        assert_eq!(prune_closed(dir.path(), 0), 0, "0 keeps them");
        assert_eq!(prune_closed(dir.path(), 30), 1);
        assert!(!old.exists() && new.exists());
    }
}
