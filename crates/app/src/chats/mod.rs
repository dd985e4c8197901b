//! Chats on disk, apart from the UI's state: the chat file's format ([`mod@format`]: one JSON file per
//! tab in the data dir's `chats/`, version 4 holding the conversation tree and tool calls), reading them back
//! (a damaged file is moved aside, never deleted, with a warning), closed tabs' chats kept in
//! `closed/` for search and pruned by age, the saver thread that writes them atomically off the
//! UI thread ([`mod@saver`]), and exports and imports ([`export`]: Markdown, our JSON, ChatGPT's
//! `conversations.json`). The app turns tabs into these and back (`app::persist`).

mod chatgpt;
pub mod export;
pub mod fmt;
pub mod format;
pub mod saver;

use std::path::Path;

pub use format::{
    SavedBranch, SavedChat, SavedFile, SavedImage, SavedMessage, SavedSampling, SavedSound,
    SavedStats, SavedTool, SavedTools, Unsent, VERSION,
};
pub use saver::{SaveJob, saver};

/// The largest chat file read back (a long chat is a few MiB).
pub const CHAT_LIMIT: u64 = 64 << 20;

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
            let bytes = gemma_files::read_limited(&p, CHAT_LIMIT).ok()?;
            let chat: SavedChat = serde_json::from_slice(&bytes).ok()?;
            ((2..=VERSION).contains(&chat.version) && !chat.messages.is_empty())
                .then_some((uid, chat))
        })
        .collect()
}

/// A chat whose tree is repaired as it is read: a copy of its file as it was goes to
/// `damaged/` (the repaired chat replaces it at the next save), and the warning says so.
fn kept_aside(dir: &Path, path: &Path, title: &str, fault: &str) -> String {
    let aside = dir.join("damaged");
    let to = aside.join(path.file_name().unwrap_or_default());
    let copied = gemma_files::create_private_dir(&aside).and_then(|_| {
        let bytes = gemma_files::read_limited(path, CHAT_LIMIT)?;
        gemma_files::write_atomic(&to, &bytes)
    });
    let title = gemma_protocol::text::short(title, 60);
    match copied {
        Ok(()) => format!(
            "chat \"{title}\": {fault}; its messages were numbered afresh and put back in their \
             places (the file as it was is kept in {})",
            to.display()
        ),
        Err(e) => format!(
            "chat \"{title}\": {fault}; its messages were numbered afresh and put back in their \
             places (the file as it was could not be kept aside: {e})"
        ),
    }
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
        // Not a regular file (a pipe would block start-up) or too large: moved aside too.
        let parsed = gemma_files::read_limited(&path, CHAT_LIMIT)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_slice::<SavedChat>(&t).map_err(|e| e.to_string()))
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
            Ok(c) => {
                if let Some(fault) = format::tree_fault(&c) {
                    warnings.push(kept_aside(dir, &path, &c.title, &fault));
                }
                chats.push((uid, c));
            }
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

    /// A chat whose ids repeat is read (the app repairs it), named in a warning, and a copy of
    /// the file as it was is kept in `damaged/` (probe 2026-12-06, E6).
    #[test]
    fn a_chat_with_repeated_ids_is_read_and_kept_aside() {
        let dir = tempfile::tempdir().expect("tmp");
        let dup = |parent| SavedMessage {
            id: 2,
            parent,
            ..SavedMessage::new("model", "an answer")
        };
        let chat = SavedChat {
            version: VERSION,
            title: "dup".into(),
            messages: vec![
                SavedMessage {
                    id: 1,
                    ..SavedMessage::new("user", "hello")
                },
                dup(Some(1)),
                dup(Some(1)),
            ],
            ..SavedChat::default()
        };
        let bytes = serde_json::to_vec(&chat).expect("json");
        write_atomic(&dir.path().join("g.json"), &bytes).expect("write");
        let (chats, warnings) = load_chats(dir.path());
        assert_eq!(chats.len(), 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("used twice"), "{warnings:?}");
        let kept = std::fs::read(dir.path().join("damaged/g.json")).expect("kept aside");
        assert_eq!(kept, bytes);
    }

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

    /// A pipe named like a chat does not block start-up: it is moved aside with a warning, as
    /// a damaged file is.
    #[cfg(unix)]
    #[test]
    fn a_pipe_among_the_chats_is_set_aside_not_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("x.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            return;
        }
        let (chats, warnings) = load_chats(dir.path());
        assert!(chats.is_empty());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("not a regular file"), "{warnings:?}");
        assert!(load_closed(dir.path()).is_empty());
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
