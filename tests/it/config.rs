//! The TOML configuration: every file in `tests/fixtures/config/valid` loads, every file in
//! `invalid` is refused with exactly the message its first line (`# error: …`) gives, line and
//! column included; and the precedence flag > env > file > generation_config > built-in, through
//! the binary's `config show`.

use std::path::{Path, PathBuf};
use std::process::Command;

use gemma_app::config::Config;

fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(kind)
}

fn files(kind: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir(kind))
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[test]
fn valid_files_load() {
    let all = files("valid");
    assert!(all.len() >= 3);
    for f in all {
        Config::load(Some(&f)).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    let full = Config::load(Some(&dir("valid").join("full.toml"))).expect("full");
    assert_eq!(full.sampling.temperature, Some(0.7));
    assert_eq!(full.model.context_length, 32768);
    assert_eq!(full.model.kv_dtype, gemma_app::config::KvDtype::Q8_0);
    assert_eq!(full.model.gpu_weights, gemma_app::config::GpuWeights::Bf16);
    assert_eq!(full.ui.attach_max_kb, 64);
    assert_eq!(full.ui.keys["quit"], vec!["ctrl+x".to_string()]);
    assert_eq!(
        full.ui.keys["new-tab"],
        vec!["ctrl+t".to_string()],
        "unset keys stay"
    );
    let minimal = Config::load(Some(&dir("valid").join("minimal.toml"))).expect("minimal");
    assert_eq!(
        minimal.sampling.temperature,
        Some(1.0),
        "an integer is a number too"
    );
}

#[test]
fn invalid_files_are_refused_with_their_exact_message() {
    let all = files("invalid");
    assert!(all.len() >= 8);
    for f in all {
        let text = std::fs::read_to_string(&f).expect("read");
        let want = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# error: "))
            .unwrap_or_else(|| panic!("{} lacks its `# error:` line", f.display()));
        let err = Config::load(Some(&f)).expect_err("invalid").to_string();
        let want = format!("invalid configuration: {}{want}", f.display());
        assert_eq!(err, want, "{}", f.display());
    }
}

fn show(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gemma-chat"));
    cmd.args(["config", "show"]).args(args);
    for var in [
        "GEMMA_CHAT_TEMPERATURE",
        "GEMMA_CHAT_CONFIG",
        "GEMMA_CHAT_MODEL",
        "XDG_CONFIG_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn precedence_is_flag_env_file_model_builtin() {
    let tmp = tempfile::tempdir().expect("tmp");
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).expect("dir");
    std::fs::write(
        model.join("generation_config.json"),
        r#"{"do_sample": true, "temperature": 0.4, "top_k": 40}"#,
    )
    .expect("write");
    let file = tmp.path().join("config.toml");
    std::fs::write(&file, "[sampling]\ntemperature = 0.3\n").expect("write");
    let empty = tmp.path().join("empty.toml");
    std::fs::write(&empty, "").expect("write");
    let (m, f, e) = (
        model.to_string_lossy().into_owned(),
        file.to_string_lossy().into_owned(),
        empty.to_string_lossy().into_owned(),
    );
    let env = [("GEMMA_CHAT_TEMPERATURE", "0.2")];
    let out = show(
        &["--model", &m, "--config", &f, "--temperature", "0.1"],
        &env,
    );
    assert!(out.contains("temperature = 0.1  (flag)"), "{out}");
    let out = show(&["--model", &m, "--config", &f], &env);
    assert!(out.contains("temperature = 0.2  (env)"), "{out}");
    let out = show(&["--model", &m, "--config", &f], &[]);
    assert!(out.contains("temperature = 0.3  (file)"), "{out}");
    let out = show(&["--model", &m, "--config", &e], &[]);
    assert!(out.contains("temperature = 0.4  (model)"), "{out}");
    assert!(out.contains("top_k = 40  (model)"), "{out}");
    let out = show(&["--config", &e], &[]);
    assert!(out.contains("temperature = 1  (built-in)"), "{out}");
    assert!(out.contains("top_p = 0.95  (built-in)"), "{out}");
    // The config file itself: --config > $GEMMA_CHAT_CONFIG > $XDG_CONFIG_HOME.
    let out = show(&[], &[("GEMMA_CHAT_CONFIG", &f)]);
    assert!(out.contains("temperature = 0.3  (file)"), "{out}");
    let xdg = tmp.path().join("xdg");
    std::fs::create_dir_all(xdg.join("gemma-chat")).expect("dir");
    std::fs::write(
        xdg.join("gemma-chat/config.toml"),
        "[sampling]\ntemperature = 0.6\n",
    )
    .expect("write");
    let out = show(&[], &[("XDG_CONFIG_HOME", &xdg.to_string_lossy())]);
    assert!(out.contains("temperature = 0.6  (file)"), "{out}");
}

/// A config file that is there but cannot be read is an error that names it (exit code 2),
/// never silently the defaults; the flag for answer length takes 1 or more, as the file does.
#[test]
fn an_unreadable_config_is_an_error_not_the_defaults() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dangling = tmp.path().join("dangling.toml");
    #[cfg(unix)]
    std::os::unix::fs::symlink(tmp.path().join("gone.toml"), &dangling).expect("symlink");
    let not_utf8 = tmp.path().join("latin1.toml");
    std::fs::write(&not_utf8, b"[sampling]\n# caf\xe9\ntemperature = 0.5\n").expect("write");
    for path in [&dangling, &not_utf8] {
        let err = Config::load(Some(path))
            .expect_err("unreadable")
            .to_string();
        assert!(err.contains("cannot read the config file"), "{err}");
        let out = Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
            .args(["config", "show", "--config"])
            .arg(path)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{path:?}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .args(["--max-new-tokens", "0", "--prompt", "hi"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 or more"));
}

/// `config show` names the engine in force: a server when `[engine] kind = "remote"` says so
/// (its model's generation defaults are the server's business, not a local file's).
#[test]
fn config_show_names_a_remote_engine() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("config.toml");
    std::fs::write(
        &file,
        "[engine]\nkind = \"remote\"\nurl = \"http://127.0.0.1:9\"\nmodel = \"gemma-4\"\n",
    )
    .expect("write");
    let out = show(&["--config", &file.to_string_lossy()], &[]);
    assert!(
        out.contains("engine: remote, http://127.0.0.1:9 (model: gemma-4)"),
        "{out}"
    );
    assert!(!out.contains("demo model"), "{out}");
}

/// A config that is a pipe or a device is refused unread (it would block start-up, or never end),
/// with exit code 2.
#[cfg(unix)]
#[test]
fn a_config_that_is_not_a_file_is_refused_unread() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fifo = tmp.path().join("config.toml");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    let mut paths = vec![std::path::PathBuf::from("/dev/zero")];
    if made {
        paths.push(fifo);
    }
    for p in paths {
        let started = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
            .args(["config", "show", "--config"])
            .arg(&p)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{p:?}: {err}");
        assert!(err.contains("not a regular file"), "{err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{p:?}"
        );
    }
}
