//! llama.cpp's own programs for the tests: where `scripts/llama-cpp.sh` built them, and
//! `llama-server` / `ggml-rpc-server` run on 127.0.0.1 for as long as the handle lives.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The directory holding llama.cpp's tools (`$GEMMA_CHAT_LLAMA_BIN`, else the script's cache,
/// built on first use). Asked once per test binary: the tests that want it wait for the one
/// build, and the script's lock makes other binaries wait for it too.
pub fn llama_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(find_or_build).clone()
}

fn find_or_build() -> PathBuf {
    if let Some(dir) = std::env::var_os("GEMMA_CHAT_LLAMA_BIN") {
        return PathBuf::from(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/llama-cpp.sh");
    let out = Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/llama-cpp.sh: {e}"));
    assert!(
        out.status.success(),
        "scripts/llama-cpp.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("the script prints the directory")
            .trim(),
    )
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A llama.cpp process, killed when dropped; its output goes to `log`.
pub struct Proc {
    child: Child,
    /// Where its output goes.
    pub log: PathBuf,
}

impl Proc {
    /// Starts `program args…` with its output in `log`.
    pub fn start(program: &Path, args: &[String], log: &Path) -> Self {
        let out = std::fs::File::create(log).expect("log");
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Self {
            child,
            log: log.to_path_buf(),
        }
    }

    /// Kills it now (as a crash would: SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `llama-server` serving `model` on 127.0.0.1:`port` with `slots` slots of 2,048 tokens, the
/// Gemma 3 chat template (the demo GGUF carries none), as `gemma-3-270m`; `extra` flags after. Returns when it is healthy.
pub fn llama_server(model: &Path, port: u16, slots: usize, extra: &[&str], log: &Path) -> Proc {
    let mut args: Vec<String> = [
        "-m",
        &model.to_string_lossy(),
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "-np",
        &slots.to_string(),
        "-c",
        &(2048 * slots).to_string(),
        "-t",
        "2",
        "--swa-full",
        "--chat-template-file",
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("assets/templates/gemma3.jinja")
            .to_string_lossy(),
        "--alias",
        "gemma-3-270m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = Proc::start(&llama_bin().join("llama-server"), &args, log);
    wait_healthy(port, &p);
    p
}

/// Waits (up to two minutes) until `GET /health` answers 200.
pub fn wait_healthy(port: u16, p: &Proc) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("llama-server did not become healthy:\n{}", p.output());
}
