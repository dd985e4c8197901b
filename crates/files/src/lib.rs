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

/// The bytes of the regular file at `path` (a symlink to one is fine), at most `limit` of them:
/// anything else — a pipe (which would block), a device (`/dev/zero` never ends), a folder — or a
/// larger file is refused with [`std::io::ErrorKind::InvalidInput`] before it is read.
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let too_big = || refuse(format!("larger than {} MiB", limit >> 20));
    if len > limit {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(bytes)
}

/// The first `max` bytes (or fewer) of the regular file at `path`, refused as
/// [`read_limited`] refuses what is not one: what a header is read from.
pub fn read_head(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(len.min(max) as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `path` opened when it is a regular file (checked before and after opening: the path may
/// change in between), and its length.
fn open_regular(path: &Path) -> std::io::Result<(File, u64)> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(refuse(
            "not a regular file (a pipe, a device or a folder)".into(),
        ));
    }
    let file = File::open(path)?;
    if !file.metadata()?.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    Ok((file, meta.len()))
}

/// A refusal of what may not be read.
fn refuse(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why)
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the new one: a temp
/// file in the same directory (a fresh random name, created new: never an existing file, never
/// through a symlink), fsync, rename, fsync of the directory. On failure the temp file is removed
/// and the old file is untouched. Something at `path` that is not a regular file or a symlink (a
/// FIFO, a device, a folder) is refused, never replaced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    publish(path, bytes, true)
}

/// Writes `bytes` to a new file at `path`, as [`write_atomic`] does, but never over anything:
/// when `path` exists (a file, a symlink, a FIFO, a device) the error is
/// [`std::io::ErrorKind::AlreadyExists`] and it is untouched; with `replace`, an existing regular
/// file is replaced, and anything else is still refused ([`std::io::ErrorKind::InvalidInput`]).
/// For files a user names (exports).
pub fn write_new(path: &Path, bytes: &[u8], replace: bool) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => Err(not_regular(path)),
        Ok(_) if !replace => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists", path.display()),
        )),
        _ => publish(path, bytes, replace),
    }
}

fn not_regular(path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is not a regular file (a link, a pipe, a device or a folder): it is not replaced",
            path.display()
        ),
    )
}

/// The temp-file dance; `replace` renames over what is there, else the new file is linked in
/// only if nothing is (atomically: a race with another writer loses, it does not clobber).
fn publish(path: &Path, bytes: &[u8], replace: bool) -> std::io::Result<()> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let t = m.file_type();
        if !(t.is_file() || t.is_symlink() && replace) {
            return Err(not_regular(path));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    create_private_dir(dir)?;
    let (tmp, mut file) = temp_in(dir, path)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    let placed = written.and_then(|()| {
        if replace {
            std::fs::rename(&tmp, path)
        } else {
            std::fs::hard_link(&tmp, path)
        }
    });
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if !replace {
        let _ = std::fs::remove_file(&tmp);
    }
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A new private file in `dir` named after `path` with a random part (`.NAME.1a2b….tmp`),
/// created exclusively.
fn temp_in(dir: &Path, path: &Path) -> std::io::Result<(PathBuf, File)> {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let mut last = None;
    for _ in 0..16 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mix =
            nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let tmp = dir.join(format!(".{name}.{mix:016x}.tmp"));
        let mut o = OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        match o.open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temp name")))
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
        // Never through a symlink planted as `lock`: its target would be truncated.
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
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
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left.len(), 2, "no temp file left: {left:?}");
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "chats are private");
        }
    }

    /// Temp names are fresh: a `notes.tmp` beside the file, or a symlink planted where the old
    /// fixed temp name was, is neither touched nor followed.
    #[cfg(unix)]
    #[test]
    fn temp_files_never_clobber_or_follow_what_is_there() {
        let dir = tempfile::tempdir().expect("tmp");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"precious").expect("write");
        std::fs::write(dir.path().join("notes.tmp"), b"mine").expect("write");
        std::os::unix::fs::symlink(&outside, dir.path().join("notes.md.tmp")).expect("link");
        write_atomic(&dir.path().join("notes.md"), b"export").expect("write");
        write_atomic(&dir.path().join("notes"), b"other").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("notes.tmp")).expect("read"),
            b"mine"
        );
        assert_eq!(std::fs::read(&outside).expect("read"), b"precious");
        assert_eq!(
            std::fs::read(dir.path().join("notes.md")).expect("read"),
            b"export"
        );
    }

    /// A new file never replaces anything; with `replace`, only a regular file.
    #[cfg(unix)]
    #[test]
    fn write_new_replaces_regular_files_only_and_only_when_asked() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("chat-1.md");
        write_new(&file, b"one", false).expect("new");
        let e = write_new(&file, b"two", false).expect_err("exists");
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&file).expect("read"), b"one");
        write_new(&file, b"two", true).expect("replace");
        assert_eq!(std::fs::read(&file).expect("read"), b"two");
        let link = dir.path().join("stdout");
        std::os::unix::fs::symlink("/dev/null", &link).expect("link");
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
        #[allow(unsafe_code)]
        // SAFETY: a valid NUL-terminated path; mkfifo reads it only.
        let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0;
        for p in [link.clone()].into_iter().chain(made.then_some(fifo)) {
            for replace in [false, true] {
                assert!(write_new(&p, b"x", replace).is_err(), "{p:?} {replace}");
                assert!(!std::fs::symlink_metadata(&p).expect("there").is_file());
            }
        }
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
    }

    /// Only regular files are read, and only up to the limit; a pipe does not block.
    #[cfg(unix)]
    #[test]
    fn reads_take_regular_files_within_the_limit_only() {
        let dir = tempfile::tempdir().expect("tmp");
        let small = dir.path().join("small");
        std::fs::write(&small, b"abc").expect("write");
        assert_eq!(read_limited(&small, 3).expect("read"), b"abc");
        let e = read_limited(&small, 2).expect_err("too big");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&small, &link).expect("link");
        assert_eq!(read_limited(&link, 3).expect("through a link"), b"abc");
        for p in [Path::new("/dev/zero"), dir.path()] {
            let e = read_limited(p, 1 << 20).expect_err("not a file");
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{p:?}");
        }
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
        #[allow(unsafe_code)]
        // SAFETY: a valid NUL-terminated path; mkfifo reads it only.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
            let e = read_limited(&fifo, 1 << 20).expect_err("a pipe");
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        }
    }

    /// A `lock` planted as a symlink is refused, its target untouched.
    #[cfg(unix)]
    #[test]
    fn the_lock_file_is_never_followed() {
        let dir = tempfile::tempdir().expect("tmp");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").expect("write");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("dir");
        std::os::unix::fs::symlink(&victim, data.join("lock")).expect("link");
        assert!(DirLock::acquire(&data).is_err());
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep me");
    }
}
