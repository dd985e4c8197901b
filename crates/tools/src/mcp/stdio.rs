//! A stdio MCP server as a child process: started with an environment of its own
//! ([`child_env`]: only `PATH`, `HOME` and what the config's `env` names, after `${VAR}`
//! substitution), its own process group (a Ctrl-C at the terminal does not reach it), stdin and
//! stdout for the protocol, and stderr kept in a small [`StderrTail`] (never written to the
//! terminal) for the message when it dies. The child is killed when its [`Child`] is dropped.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::config::{ConfigError, ServerConfig, substitute};
use crate::host::clean;

/// Most bytes of a child's stderr kept (the latest ones).
pub const STDERR_KEEP: usize = 4096;
/// Most bytes of stderr quoted in a message.
pub const STDERR_QUOTE: usize = 600;

/// The variables a child inherits from gemma-chat besides the ones its config names: `PATH` so
/// that `npx`, `uvx` and `python3` resolve as they do in a shell, `HOME` so that their caches
/// and per-user installs are found. Nothing else (API keys, tokens) leaks to a server.
pub const INHERITED: [&str; 2] = ["PATH", "HOME"];

/// The latest bytes a child wrote to stderr, and why its output was cut off, if it was.
#[derive(Debug, Default)]
pub struct StderrTail {
    bytes: Vec<u8>,
    pub(crate) refused: Option<&'static str>,
}

impl StderrTail {
    /// Its output was ended: `why` (the first reason stays).
    pub(crate) fn refuse(&mut self, why: &'static str) {
        self.refused.get_or_insert(why);
    }

    /// Appends `chunk`, keeping the last [`STDERR_KEEP`] bytes.
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > STDERR_KEEP {
            let drop = self.bytes.len() - STDERR_KEEP;
            self.bytes.drain(..drop);
        }
    }

    /// The last lines, cleaned to one line of at most [`STDERR_QUOTE`] bytes; empty when the
    /// child wrote nothing.
    pub fn quote(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        let text = text.trim();
        let start = text.len().saturating_sub(STDERR_QUOTE);
        let start = (start..=text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let lines: Vec<&str> = text[start..]
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        clean::message(&lines.join(" | "), STDERR_QUOTE)
    }
}

/// A started child: the protocol's pipes, the process, its stderr so far.
pub struct Spawned {
    /// The process (killed on drop).
    pub child: Child,
    /// What the server writes: the protocol's messages.
    pub stdout: ChildStdout,
    /// What the server reads.
    pub stdin: ChildStdin,
    /// Its stderr, filled by a task on the runtime.
    pub stderr: Arc<Mutex<StderrTail>>,
}

/// The child's whole environment: [`INHERITED`] from `parent`, then the config's `env` with
/// `${VAR}` replaced from `parent` (a variable `parent` lacks is an error naming it).
pub fn child_env(
    config: &ServerConfig,
    parent: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut env = BTreeMap::new();
    for name in INHERITED {
        if let Some(value) = parent(name) {
            env.insert(name.to_owned(), value);
        }
    }
    for (key, value) in &config.env {
        env.insert(key.clone(), substitute(value, parent)?);
    }
    Ok(env)
}

/// Starts `program args` with exactly `env`, piped stdio and its own process group; must run on
/// a tokio runtime (the stderr reader is a task).
pub fn spawn(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> std::io::Result<Spawned> {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command.spawn()?;
    let (Some(stdin), Some(stdout), Some(mut err)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("the child's pipes were not opened"));
    };
    let stderr = Arc::new(Mutex::new(StderrTail::default()));
    let tail = Arc::clone(&stderr);
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = err.read(&mut buf).await {
            if let Ok(mut tail) = tail.lock() {
                tail.push(&buf[..n]);
            }
        }
    });
    Ok(Spawned {
        child,
        stdout,
        stdin,
        stderr,
    })
}

/// Why the child's output was ended, and what its stderr says, for a message: ` (why)`,
/// ` (stderr: …)`, both, or nothing.
pub fn stderr_note(stderr: &Mutex<StderrTail>) -> String {
    let (quote, refused) = stderr
        .lock()
        .map(|t| (t.quote(), t.refused))
        .unwrap_or_default();
    let mut note = refused.map(|why| format!(" ({why})")).unwrap_or_default();
    if !quote.is_empty() {
        note.push_str(&format!(" (stderr: {quote})"));
    }
    note
}
