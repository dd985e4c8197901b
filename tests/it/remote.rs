//! The remote engine against a real llama-server (built from the llama.cpp tree vendored in the
//! llama-cpp-python sdist by `scripts/llama-cpp.sh`) serving the demo model on 127.0.0.1: warm
//! tabs on pinned slots with the server's own cache numbers, stop and follow-up, the server killed
//! mid-answer and restarted, and the model split across two processes by llama.cpp's RPC worker.
//! Everything stays on 127.0.0.1.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::llama::{Proc, free_port, llama_bin, llama_server, wait_healthy};
use gemma_engine::protocol::TabSettings;
use gemma_engine::protocol::{Attachment, Command, Event, Reuse, TabId, TurnEnd, TurnStats};
use gemma_engine::{EngineHandle, RemoteOptions, spawn_remote};
use gemma_model::demo;

fn demo_model() -> PathBuf {
    demo::ensure(&mut demo::print_progress()).expect("the demo model")
}

fn options(port: u16) -> RemoteOptions {
    crate::common::remote_tools::options(format!("http://127.0.0.1:{port}"), Some("gemma-3-270m"))
}

/// The engine on the server at `port`, ready, with `tabs` set up (greedy, `max` tokens).
fn engine(port: u16, tabs: &[TabId], max: usize) -> EngineHandle {
    let (h, model, context_length) = ready(port);
    assert!(
        model.contains("gemma-3-270m") && model.contains("llama-server"),
        "{model}"
    );
    assert!(model.contains("tokens counted by the server"), "{model}");
    assert_eq!(context_length, 2048, "a slot's context");
    greedy(&h, tabs, max);
    h
}

/// The engine on the server at `port` once ready: the model it names and its context.
fn ready(port: u16) -> (EngineHandle, String, usize) {
    let h = spawn_remote(options(port));
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("ready")
        {
            Event::Loading { .. } => {}
            Event::Ready {
                model,
                context_length,
                ..
            } => return (h, model, context_length),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// `tabs` set up greedy, answers of at most `max` tokens.
fn greedy(h: &EngineHandle, tabs: &[TabId], max: usize) {
    for &tab in tabs {
        let settings = TabSettings {
            max_new_tokens: max,
            ..TabSettings::default()
        };
        crate::common::chat::configure(h, tab, settings);
    }
}

/// How a turn went.
#[derive(Debug)]
struct Done {
    answer: String,
    outcome: Result<(TurnEnd, TurnStats), String>,
    /// The context meter after it.
    tokens: usize,
}

/// Sends `text` to `tab`; `on_token` runs after the first answer text (to stop or kill).
fn turn(h: &EngineHandle, tab: TabId, text: &str, mut on_token: impl FnMut()) -> Done {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images: Vec::new(),
    });
    let (mut answer, mut tokens, mut first) = (String::new(), 0, true);
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(180))
            .expect("event")
        {
            Event::Token { tab: t, text } if t == tab => {
                answer.push_str(&text);
                if first {
                    first = false;
                    on_token();
                }
            }
            Event::Committed { tab: t, tokens: n } if t == tab => tokens = n,
            Event::Finished {
                tab: t, end, stats, ..
            } if t == tab => {
                return Done {
                    answer,
                    outcome: Ok((end, stats)),
                    tokens,
                };
            }
            Event::Failed { tab: t, error } if t == tab => {
                return Done {
                    answer,
                    outcome: Err(error),
                    tokens,
                };
            }
            _ => {}
        }
    }
}

fn stats(d: &Done) -> &TurnStats {
    &d.outcome.as_ref().expect("the turn finished").1
}

/// Two tabs on two slots, three turns each, alternating: every follow-up finds the tab's whole
/// history in the server's cache (by the server's own count), so it prefills only the new turn.
fn two_tabs_alternate(port: u16) {
    let h = engine(port, &[1, 2], 12);
    let mut history = [0usize; 3];
    for round in 0..3 {
        for tab in [1u64, 2] {
            let d = turn(
                &h,
                tab,
                &format!("Tab {tab}, message {round}: tell me a fact."),
                || {},
            );
            let s = stats(&d);
            let before = history[tab as usize];
            eprintln!(
                "tab {tab} turn {round}: history {before}, {} reused {}, prefilled {}",
                s.reuse.as_str(),
                s.reused_tokens,
                s.prefilled_tokens
            );
            if round == 0 {
                assert_eq!(s.reuse, Reuse::New, "{d:?}");
            } else {
                assert_eq!(s.reuse, Reuse::ExactPrefix, "{d:?}");
                // The server never evaluates the last token it sampled: its cache holds the
                // history but that one.
                assert!(
                    s.reused_tokens + 1 >= before,
                    "tab {tab} round {round}: the server reused {} of a {before}-token history",
                    s.reused_tokens
                );
                assert!(s.prefilled_tokens < 40, "only the new turn: {d:?}");
            }
            assert!(d.tokens > before, "the meter grows");
            history[tab as usize] = d.tokens;
        }
    }
}

#[test]
fn two_tabs_stay_warm_on_their_slots() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let _server = llama_server(&demo_model(), port, 2, &[], &dir.path().join("server.log"));
    two_tabs_alternate(port);
}

#[test]
fn stop_mid_answer_then_a_follow_up() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let _server = llama_server(&demo_model(), port, 2, &[], &dir.path().join("server.log"));
    let h = engine(port, &[1], 64);
    let d = turn(&h, 1, "Write a long story about a lighthouse.", || {
        h.send(Command::Cancel { tab: 1 });
    });
    let (end, _) = d.outcome.as_ref().expect("stopped, not failed");
    assert_eq!(*end, TurnEnd::Cancelled, "{d:?}");
    assert!(!d.answer.is_empty());
    // The tab is usable at once; the next turn re-sends the cut answer and finds it cached
    // (all but the tail the server had not yet seen come back).
    let next = turn(&h, 1, "Now a short one.", || {});
    let s = stats(&next);
    assert!(
        matches!(s.reuse, Reuse::ExactPrefix | Reuse::Rewind),
        "{next:?}"
    );
    assert!(s.reused_tokens > 0, "{next:?}");
    assert!(next.tokens > d.tokens, "{next:?}");
}

#[test]
fn a_server_killed_mid_answer_fails_the_tab_and_the_next_turn_works_after_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let model = demo_model();
    let mut server = llama_server(&model, port, 2, &[], &dir.path().join("server.log"));
    let h = engine(port, &[1, 2], 64);
    let first = turn(&h, 2, "Say hello.", || {});
    assert!(first.outcome.is_ok(), "{first:?}");
    let d = turn(&h, 1, "Write a long story about a lighthouse.", || {
        server.kill()
    });
    let error = d.outcome.as_ref().expect_err("the turn fails");
    assert!(
        error.contains("lost mid-answer") || error.contains("cannot reach"),
        "{error}"
    );
    assert!(error.contains("127.0.0.1"), "says which server: {error}");
    assert!(!d.answer.is_empty(), "what came is kept");
    // Down: a turn fails at once with what to do, and the tab stays usable.
    let down = turn(&h, 2, "Are you there?", || {});
    let error = down.outcome.expect_err("the server is down");
    assert!(error.contains("is it running?"), "{error}");
    let _server = llama_server(&model, port, 2, &[], &dir.path().join("server2.log"));
    let after = turn(&h, 1, "Go on.", || {});
    let s = stats(&after);
    // A new server has nothing cached: the whole history (the cut answer included) is sent again.
    assert_eq!(s.reuse, Reuse::Evicted, "{after:?}");
    assert!(s.prefilled_tokens > d.tokens / 2, "{after:?}");
}

/// The model split over two processes: llama.cpp's RPC worker holds nine of the layers (and
/// their KV cache), the server the rest; the same tabs stay warm the same way.
#[test]
fn the_model_split_across_an_rpc_worker_serves_the_same_tabs() {
    let dir = tempfile::tempdir().expect("tmp");
    let rpc_port = free_port();
    let rpc = Proc::start(
        &llama_bin().join("ggml-rpc-server"),
        &[
            "-H".into(),
            "127.0.0.1".into(),
            "-p".into(),
            rpc_port.to_string(),
            "-t".into(),
            "1".into(),
        ],
        &dir.path().join("rpc.log"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", rpc_port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "rpc worker: {}",
            rpc.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let port = free_port();
    let rpc_addr = format!("127.0.0.1:{rpc_port}");
    let server = llama_server(
        &demo_model(),
        port,
        2,
        // Half the layers on the worker, half in the server: a real split.
        &["--rpc", &rpc_addr, "-ngl", "9", "-lv", "4"],
        &dir.path().join("server.log"),
    );
    wait_healthy(port, &server);
    let log = server.output();
    assert!(
        log.contains(&format!("RPC0[{rpc_addr}] model buffer size"))
            && log.contains("offloaded 9/19 layers"),
        "the server splits the model with the RPC worker:\n{log}"
    );
    two_tabs_alternate(port);
    assert!(
        rpc.output().contains("Accepted client connection"),
        "{}",
        rpc.output()
    );
}

/// Piped chat and `--prompt` through the server: answers on stdout, the server's numbers on
/// stderr, the second line of a piped chat warm.
#[test]
fn headless_chat_through_the_server() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let _server = llama_server(&demo_model(), port, 1, &[], &dir.path().join("server.log"));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "").expect("config");
    let url = format!("http://127.0.0.1:{port}");
    let run = |args: &[&str], stdin: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
            .args(["--remote", &url, "--config", &config.to_string_lossy()])
            .args(["--temperature", "0", "--max-new-tokens", "8"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("ends");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (answer, log) = run(&["--prompt", "Say hello."], "");
    assert!(!answer.trim().is_empty(), "{log}");
    assert!(log.contains("[new · reused 0 · prefilled"), "{log}");
    let (answers, log) = run(&[], "Hello there\nAnd again\n");
    assert!(
        answers.lines().filter(|l| !l.is_empty()).count() >= 1,
        "{answers}"
    );
    assert!(log.contains("[exact_prefix · reused"), "{log}");
}

/// The `(prompt tokens, answer)` of a turn on `tab` with `images`, by the server's count.
fn turn_with(h: &EngineHandle, tab: TabId, text: &str, images: Vec<Attachment>) -> Done {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images,
    });
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(180))
            .expect("event")
        {
            Event::Finished {
                tab: t, end, stats, ..
            } if t == tab => {
                return Done {
                    answer: String::new(),
                    outcome: Ok((end, stats)),
                    tokens: 0,
                };
            }
            Event::Failed { tab: t, error } if t == tab => {
                return Done {
                    answer: String::new(),
                    outcome: Err(error),
                    tokens: 0,
                };
            }
            _ => {}
        }
    }
}

#[test]
fn pictures_go_to_a_llama_server_with_an_mmproj() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = root.join("tests/fixtures/vision/e2b_style");
    let (mmproj, template) = (
        fixture.join("gguf/mmproj-model.gguf"),
        root.join("assets/templates/gemma4.jinja"),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let extra = [
        "--mmproj",
        &mmproj.to_string_lossy(),
        "--chat-template-file",
        &template.to_string_lossy(),
    ];
    let model = fixture.join("gguf/model.gguf");
    let _server = llama_server(&model, port, 1, &extra, &dir.path().join("server.log"));
    // The model's own context (1,024) bounds the slot.
    let (h, _, _) = ready(port);
    greedy(&h, &[1, 2], 3);
    let plain = turn_with(&h, 1, "What is it?", Vec::new());
    let prompt = |d: &Done| {
        let s = stats(d);
        s.reused_tokens + s.prefilled_tokens
    };
    let picture = vec![Attachment::image(fixture.join("a.png"), 70)];
    let seen = turn_with(&h, 2, "What is it?", picture);
    // The server counted the picture's tokens (llama.cpp's own budget, 40 at least).
    assert!(
        prompt(&seen) >= prompt(&plain) + 40,
        "{seen:?} vs {plain:?}"
    );
    // A follow-up sends the conversation again with its picture.
    let next = turn_with(&h, 2, "And?", Vec::new());
    assert!(prompt(&next) > prompt(&seen), "{next:?} after {seen:?}");
    // A file that is no picture fails in its tab, with the reason.
    let bad = vec![Attachment::image(fixture.join("config.json"), 70)];
    let err = turn_with(&h, 1, "And this?", bad)
        .outcome
        .expect_err("refused");
    assert!(err.contains("not a PNG"), "{err}");
}
