//! Live reload: watches the config file's directory (editors save by writing a temp file and
//! renaming it over the old one, which a watch on the file itself would miss), waits until the
//! writes settle, then reads and checks the file again.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use super::Config;
use crate::error::{Error, Result};

/// How long the file must stay quiet before it is read.
const SETTLE: Duration = Duration::from_millis(200);

/// Keeps the watch alive; dropping it stops watching.
pub struct ConfigWatch {
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for ConfigWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConfigWatch")
    }
}

/// Calls `on_change` with the file's new contents (or why they are invalid) after each change
/// to `path`. The directory is created when it does not exist yet.
pub fn watch(
    path: &Path,
    on_change: impl Fn(Result<Config>) + Send + 'static,
) -> Result<ConfigWatch> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let name = path.file_name().map(|n| n.to_os_string());
    let (tx, rx) = channel::<()>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if let Ok(ev) = ev
            && ev
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        {
            let _ = tx.send(());
        }
    })
    .map_err(|e| Error::Settings(format!("cannot watch {}: {e}", dir.display())))?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| Error::Settings(format!("cannot watch {}: {e}", dir.display())))?;
    let file: PathBuf = path.to_path_buf();
    std::thread::spawn(move || {
        while rx.recv().is_ok() {
            // Debounce: wait until no event came for SETTLE.
            loop {
                match rx.recv_timeout(SETTLE) {
                    Ok(()) => continue,
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            on_change(Config::load(Some(&file)));
        }
    });
    Ok(ConfigWatch { _watcher: watcher })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn an_editor_style_save_is_seen_once_settled() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[sampling]\ntemperature = 0.2\n").expect("write");
        let (tx, rx) = channel();
        let _w = watch(&path, move |c| {
            let _ = tx.send(c.map(|c| c.sampling.temperature).map_err(|e| e.to_string()));
        })
        .expect("watch");
        // Write a temp file, then rename it over the config, as editors do.
        let tmp = dir.path().join(".config.toml.swp");
        std::fs::write(&tmp, "[sampling]\ntemperature = 0.5\n").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        let got = rx.recv_timeout(Duration::from_secs(10)).expect("a reload");
        assert_eq!(got, Ok(Some(0.5)));
        // An invalid save is reported, with its place.
        std::fs::write(&tmp, "[sampling]\ntemperature = 9\n").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        let got = rx.recv_timeout(Duration::from_secs(10)).expect("a reload");
        let err = got.expect_err("invalid");
        assert!(err.contains(":2:15:"), "{err}");
    }
}
