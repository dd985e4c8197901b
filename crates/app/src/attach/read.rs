//! Finding and reading the files `/attach` and `--attach` name: arguments split as a shell would
//! (quotes, `~`), globs expanded (at most [`MAX_FILES`] files), and each file read as text or
//! refused with the reason: a folder, binary data, not UTF-8, above `ui.attach_max_kb`, or what
//! the OS said.

use std::path::{Path, PathBuf};

use super::TextFile;

/// Most files one glob may attach.
pub const MAX_FILES: usize = 32;

/// The leading bytes checked for binary data.
const SNIFF: usize = 8192;

/// Why a file, or a pattern, was not attached; each message names it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttachError {
    /// A NUL byte near the start.
    #[error("cannot attach {name}: it is not text (binary data)")]
    Binary {
        /// The file.
        name: String,
    },
    /// Text (no NUL byte), but not UTF-8: Latin-1, say, or one bad byte.
    #[error("cannot attach {name}: it is not UTF-8 text (invalid byte at offset {at})")]
    NotUtf8 {
        /// The file.
        name: String,
        /// The first invalid byte.
        at: usize,
    },
    /// Larger than the setting allows.
    #[error("cannot attach {name}: it is {size}, above ui.attach_max_kb = {max_kb} KiB")]
    TooLarge {
        /// The file.
        name: String,
        /// Its size, for people.
        size: String,
        /// The setting.
        max_kb: u64,
    },
    /// A folder, not a file.
    #[error("cannot attach {name}: it is a folder (a glob such as {name}/*.rs attaches its files)")]
    Folder {
        /// The folder.
        name: String,
    },
    /// Something that is not a regular file (a pipe, a device).
    #[error("cannot attach {name}: it is not a regular file")]
    Special {
        /// The path.
        name: String,
    },
    /// The OS refused: missing, no permission, ….
    #[error("cannot attach {name}: {reason}")]
    Io {
        /// The path.
        name: String,
        /// What the OS said.
        reason: String,
    },
    /// A glob that matches no file.
    #[error("nothing matches {pattern}")]
    NoMatch {
        /// The pattern.
        pattern: String,
    },
    /// A glob that matches too many files.
    #[error("{pattern} matches {n} files, more than {MAX_FILES} at once: narrow it")]
    TooMany {
        /// The pattern.
        pattern: String,
        /// Files it matched.
        n: usize,
    },
    /// Not a pattern the glob syntax reads.
    #[error("{pattern} is not a valid glob: {why}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// Why.
        why: String,
    },
}

/// The paths in `/attach`'s argument: the whole of it when it names something (a path with
/// spaces, unquoted), else its words split as a shell would (quotes group, `\` escapes); an
/// argument the shell rules cannot read (an unclosed quote) is one path.
pub fn split_args(arg: &str) -> Vec<String> {
    let arg = arg.trim();
    if arg.is_empty() {
        return Vec::new();
    }
    if expand_home(arg).exists() {
        return vec![arg.to_string()];
    }
    shlex::split(arg).unwrap_or_else(|| vec![arg.trim_matches(['\'', '"']).to_string()])
}

/// `~/x` as the home directory's `x`; a `file://` URL as its path.
pub fn expand_home(s: &str) -> PathBuf {
    let s = s.strip_prefix("file://").unwrap_or(s);
    match (s.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(s),
    }
}

/// The paths `arg` names: itself (`~` expanded), or, when it holds `*`, `?` or `[` and names
/// nothing as it is, the files its glob matches in order (folders left out; hidden files only
/// when the pattern spells the dot), [`MAX_FILES`] at most.
pub fn expand(arg: &str) -> Result<Vec<PathBuf>, AttachError> {
    let path = expand_home(arg);
    if !arg.contains(['*', '?', '[']) || path.exists() {
        return Ok(vec![path]);
    }
    let pattern = printable(arg);
    let options = glob::MatchOptions {
        require_literal_leading_dot: true,
        ..glob::MatchOptions::new()
    };
    let paths =
        glob::glob_with(&path.to_string_lossy(), options).map_err(|e| AttachError::BadPattern {
            pattern: pattern.clone(),
            why: e.msg.into(),
        })?;
    // Unreadable entries (a folder without permission) are passed over, as a shell does.
    let files: Vec<PathBuf> = paths.flatten().filter(|p| !p.is_dir()).collect();
    match files.len() {
        0 => Err(AttachError::NoMatch { pattern }),
        n if n > MAX_FILES => Err(AttachError::TooMany { pattern, n }),
        _ => Ok(files),
    }
}

/// The file at `path` as text, named as the user would write it; refused when it is a folder,
/// binary, not UTF-8, or above `max_kb` KiB.
pub fn read_text(path: &Path, max_kb: u64) -> Result<TextFile, AttachError> {
    let name = display_name(path);
    let io = |e: std::io::Error| AttachError::Io {
        name: name.clone(),
        reason: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return Err(AttachError::Folder { name });
    }
    if !meta.is_file() {
        return Err(AttachError::Special { name });
    }
    let limit = max_kb.saturating_mul(1024);
    let too_large = |len: u64| AttachError::TooLarge {
        name: name.clone(),
        size: crate::chats::fmt::human_bytes(len as usize),
        max_kb,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    // Read with the limit again: the file may have grown, or been swapped for a pipe.
    let bytes = gemma_files::read_limited(path, limit).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput if meta.len() <= limit => too_large(limit + 1),
        _ => io(e),
    })?;
    let head = &bytes[..bytes.len().min(SNIFF)];
    if head.contains(&0) {
        return Err(AttachError::Binary { name });
    }
    let text = String::from_utf8(bytes).map_err(|e| AttachError::NotUtf8 {
        name: name.clone(),
        at: e.utf8_error().valid_up_to(),
    })?;
    Ok(TextFile::new(name, text))
}

/// `path` as a name to show and send: `~/…` under the home directory, one printable line.
fn display_name(path: &Path) -> String {
    let shown = match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if !home.as_os_str().is_empty() => match path.strip_prefix(&home) {
            Ok(rest) => Path::new("~").join(rest),
            Err(_) => path.to_path_buf(),
        },
        _ => path.to_path_buf(),
    };
    printable(&shown.to_string_lossy())
}

fn printable(s: &str) -> String {
    gemma_protocol::text::one_line(s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).expect("write");
        }
        dir
    }

    #[test]
    fn text_is_read_and_binary_large_folders_and_missing_files_are_refused() {
        let big = vec![b'a'; 2048];
        let mut late = vec![b'a'; SNIFF + 10];
        late.push(0xff);
        let d = dir_with(&[
            ("a.rs", b"fn main() {}\n"),
            ("x.bin", b"\x7fELF\0\0\x01"),
            ("latin1.bin", b"caf\xe9"),
            ("big.txt", &big),
            ("late.txt", &late),
        ]);
        let p = |n: &str| d.path().join(n);
        let f = read_text(&p("a.rs"), 1).expect("text");
        assert_eq!(f.text, "fn main() {}\n");
        assert!(f.name.ends_with("a.rs"));
        let err = |n: &str| read_text(&p(n), 1).expect_err(n).to_string();
        assert!(err("x.bin").ends_with("x.bin: it is not text (binary data)"));
        // No NUL: text in another encoding, said as such (probe 2026-12-06, F12).
        assert!(err("latin1.bin").ends_with("it is not UTF-8 text (invalid byte at offset 3)"));
        assert!(
            err("big.txt").ends_with("big.txt: it is 2.0 kB, above ui.attach_max_kb = 1 KiB"),
            "{}",
            err("big.txt")
        );
        assert!(read_text(&p("big.txt"), 2).is_ok());
        let late = read_text(&p("late.txt"), 64).expect_err("late");
        assert!(matches!(late, AttachError::NotUtf8 { at, .. } if at == SNIFF + 10));
        assert!(err("").contains("it is a folder"));
        assert!(err("gone.txt").contains("gone.txt: No such file or directory"));
    }

    #[test]
    fn globs_match_files_in_order_and_are_capped() {
        let d = dir_with(&[
            ("b.rs", b"b"),
            ("a.rs", b"a"),
            (".h.rs", b"h"),
            ("c.md", b"c"),
        ]);
        std::fs::create_dir(d.path().join("sub.rs")).expect("dir");
        let root = d.path().display().to_string();
        let got = expand(&format!("{root}/*.rs")).expect("matches");
        let names: Vec<_> = got.iter().filter_map(|p| p.file_name()).collect();
        assert_eq!(names, ["a.rs", "b.rs"]);
        assert_eq!(
            expand(&format!("{root}/*.py")),
            Err(AttachError::NoMatch {
                pattern: format!("{root}/*.py")
            })
        );
        assert!(matches!(
            expand(&format!("{root}/[.rs")),
            Err(AttachError::BadPattern { .. })
        ));
        // A plain path is itself, whether or not it exists.
        assert_eq!(expand("no/such.rs"), Ok(vec![PathBuf::from("no/such.rs")]));
        for i in 0..=MAX_FILES {
            std::fs::write(d.path().join(format!("f{i}.txt")), "x").expect("write");
        }
        assert!(matches!(
            expand(&format!("{root}/*.txt")),
            Err(AttachError::TooMany { n, .. }) if n == MAX_FILES + 1
        ));
    }

    #[test]
    fn arguments_split_like_a_shell_unless_the_whole_names_a_file() {
        assert_eq!(split_args("a.rs  b.md"), ["a.rs", "b.md"]);
        assert_eq!(
            split_args("'my notes.txt' \"x y.rs\""),
            ["my notes.txt", "x y.rs"]
        );
        assert_eq!(split_args("don't.txt"), ["don't.txt"]);
        assert!(split_args("  ").is_empty());
        let d = dir_with(&[("with space.txt", b"x")]);
        let whole = d.path().join("with space.txt").display().to_string();
        assert_eq!(split_args(&whole), [whole]);
    }
}
