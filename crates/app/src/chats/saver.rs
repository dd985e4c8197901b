//! The saver thread: chat files, archives, exports and "always approve" in the config written
//! off the UI thread, in order, atomically; a failed save is reported (and counted, so quitting
//! says so), a failed export or config edit only reported.

use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};

use super::format::SavedChat;
use gemma_files::{write_atomic, write_new};

/// What the saver thread does.
#[derive(Debug, Clone)]
pub enum SaveJob {
    /// Write `chat` to the file named `uid`.
    Write(String, Box<SavedChat>),
    /// Move the file named `uid` to `closed/`.
    Archive(String),
    /// Move the file named `uid` back from `closed/` (a closed chat reopened).
    Reopen(String),
    /// Remove the file named `uid`, if there is one (an empty tab).
    Remove(String),
    /// Write an export: the path and its text.
    Export(PathBuf, String),
    /// "Always approve" a tool: its name added to its server's `auto_approve` in the user's
    /// config file.
    AutoApprove {
        /// The config file.
        config: PathBuf,
        /// The tool's server (`builtin` for a built-in).
        server: String,
        /// The tool.
        tool: String,
    },
}

/// Starts the saver thread for `dir`; errors come back through `on_error`. Dropping the sender
/// ends the thread once every queued job is written; join the handle to wait for that.
pub fn saver(
    dir: PathBuf,
    on_error: impl Fn(String) + Send + 'static,
) -> (Sender<SaveJob>, std::thread::JoinHandle<Vec<String>>) {
    let (tx, rx) = channel::<SaveJob>();
    let handle = std::thread::spawn(move || {
        let mut failed = Vec::new();
        for job in rx {
            if let SaveJob::Export(path, text) = job {
                // An export that fails loses no chat: it is said, not counted as a failed save.
                if let Err(e) = write_new(&path, text.as_bytes(), false) {
                    on_error(format!("exporting to {}: {e}", path.display()));
                }
                continue;
            }
            if let SaveJob::AutoApprove {
                config,
                server,
                tool,
            } = &job
            {
                // Said, not counted: the chats are safe, and the engine approves it this run.
                if let Err(e) = crate::config::approve::save_auto_approve(config, server, tool) {
                    on_error(e.to_string());
                }
                continue;
            }
            let result = match job {
                SaveJob::Export(..) | SaveJob::AutoApprove { .. } => Ok(()),
                SaveJob::Write(uid, chat) => serde_json::to_vec_pretty(&chat)
                    .map_err(std::io::Error::other)
                    .and_then(|bytes| write_atomic(&dir.join(format!("{uid}.json")), &bytes)),
                SaveJob::Remove(uid) => match std::fs::remove_file(dir.join(format!("{uid}.json")))
                {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                },
                SaveJob::Reopen(uid) => {
                    let from = dir.join("closed").join(format!("{uid}.json"));
                    if from.exists() {
                        std::fs::rename(&from, dir.join(format!("{uid}.json")))
                    } else {
                        Ok(())
                    }
                }
                SaveJob::Archive(uid) => {
                    let from = dir.join(format!("{uid}.json"));
                    let closed = dir.join("closed");
                    if from.exists() {
                        gemma_files::create_private_dir(&closed).and_then(|_| {
                            std::fs::rename(&from, closed.join(format!("{uid}.json")))
                        })
                    } else {
                        Ok(())
                    }
                }
            };
            if let Err(e) = result {
                let what = format!("saving chats in {}: {e}", dir.display());
                on_error(what.clone());
                failed.push(what);
            }
        }
        failed
    });
    (tx, handle)
}
