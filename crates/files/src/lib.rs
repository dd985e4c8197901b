//! Files the user's data lives in: crash-safe writes, private to the user (files 0600,
//! directories 0700 on Unix: chats are as private as shell history), shared by the chats
//! (`gemma-app`'s `chats`), the conversations and the KV snapshots (`engine`); and the lock that gives
//! a data directory one owner at a time ([`DirLock`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Creates `dir` and its missing parents, private to the user.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Opens `path` for writing, created private to the user (0600), emptied.
pub fn create_private(path: &Path) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the new one: a temp
/// file in the same directory, fsync, rename, fsync of the directory. On failure the temp file
/// is removed and the old file is untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    let tmp = path.with_extension("tmp");
    let written = create_private(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A data directory's owner: an advisory lock on its `lock` file, held while this value lives,
/// with the owner's process id written in it.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    path: PathBuf,
}

/// Why a data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "another gemma-chat (process {pid}) is using {dir}: quit it first, or start this one with \
         GEMMA_CHAT_DATA_DIR set to another directory"
    )]
    Held {
        /// The data directory.
        dir: String,
        /// The holder's process id, as it wrote it (`?` when unreadable).
        pid: String,
    },
    /// The lock file could not be made.
    #[error("cannot lock the data directory {dir}: {cause}")]
    Io {
        /// The data directory.
        dir: String,
        /// What failed.
        cause: std::io::Error,
    },
}

impl DirLock {
    /// Takes `dir` for this process, or says who has it.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let io = |cause| LockError::Io {
            dir: dir.display().to_string(),
            cause,
        };
        create_private_dir(dir).map_err(io)?;
        let path = dir.join("lock");
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut file = o.open(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(LockError::Held {
                    dir: dir.display().to_string(),
                    pid: if pid.is_empty() { "?" } else { pid }.to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_has_one_owner_at_a_time() {
        let dir = tempfile::tempdir().expect("tmp");
        let first = DirLock::acquire(dir.path()).expect("free");
        let err = DirLock::acquire(dir.path()).expect_err("held").to_string();
        assert!(
            err.contains(&std::process::id().to_string()) && err.contains("GEMMA_CHAT_DATA_DIR"),
            "{err}"
        );
        drop(first);
        DirLock::acquire(dir.path()).expect("free again");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temp() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("a.json");
        write_atomic(&path, b"old").expect("write");
        // The target is a directory now: the rename fails.
        let blocked = dir.path().join("b.json");
        std::fs::create_dir(&blocked).expect("dir");
        std::fs::write(blocked.join("x"), b"x").expect("write");
        assert!(write_atomic(&blocked, b"new").is_err());
        assert!(!dir.path().join("b.tmp").exists(), "no temp file left");
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "chats are private");
        }
    }
}
