//! Headless `--prompt` against a hostile OpenAI-compatible server on 127.0.0.1, through the
//! binary, with `[engine] idle_timeout_s = 2`: an endless stream, a stall after the head, a
//! 60 MB event line, a huge error body, a huge and a stalled model list, absurd slots, context
//! and usage, escape sequences and bidi overrides, an echoed API key, bytes that are not UTF-8.
//! Each run must end (exit 0 or 1) with no escape on stdout or stderr and the key nowhere.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const KEY: &str = "hostile-test-key-8f2a";

/// What the server does with `/v1/models` and `/props`.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    /// A plain model list; `/props` says absurd slots and context.
    Plain,
    /// A model list of 40 MB.
    HugeList,
    /// The head of `/v1/models`, then nothing.
    StallList,
}

/// Serves until the test ends; a chat request is answered by the mode its prompt names.
fn server(start: Start) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn, start));
        }
    });
    port
}

fn json(conn: &mut TcpStream, status: &str, text: &str) {
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn answer(mut conn: TcpStream, start: Start) {
    let Some((head, body)) = crate::common::http::request(&conn) else {
        return;
    };
    let line = head.first().cloned().unwrap_or_default();
    if line.starts_with("GET /v1/models") {
        return match start {
            Start::Plain => json(
                &mut conn,
                "200 OK",
                "{\"data\":[{\"id\":\"m\\u001b]0;pwned\\u0007\\u202e\",\"max_model_len\":18446744073709551615}]}",
            ),
            Start::HugeList => {
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"data\":[",
                );
                let entry = b"{\"id\":\"model-with-a-long-name-0123456789\"},";
                for _ in 0..1_000_000 {
                    if conn.write_all(entry).is_err() {
                        return;
                    }
                }
            }
            Start::StallList => {
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"da");
                std::thread::sleep(Duration::from_secs(600));
            }
        };
    }
    if line.starts_with("GET /props") {
        return json(
            &mut conn,
            "200 OK",
            "{\"total_slots\":18446744073709551615,\"default_generation_settings\":{\"n_ctx\":1e300}}",
        );
    }
    if !line.starts_with("POST /v1/chat/completions") {
        return json(&mut conn, "404 Not Found", "{\"error\":\"no\"}");
    }
    let mode = body
        .split("MODE-")
        .nth(1)
        .unwrap_or("")
        .split('"')
        .next()
        .unwrap_or("");
    stream(conn, mode);
}

fn delta(text: &str) -> Vec<u8> {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text}}}}}]}}\n\n")
        .into_bytes()
}

const FINISH: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";

/// A chat request's answer in `mode`.
fn stream(mut conn: TcpStream, mode: &str) {
    if mode == "bigerror" {
        let _ = write!(
            conn,
            "HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{{\"error\":{{\"message\":\"bad key {KEY}\\u001b[2J "
        );
        let filler = vec![b'x'; 1 << 20];
        for _ in 0..1500 {
            if conn.write_all(&filler).is_err() {
                return;
            }
        }
        return;
    }
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    let mut send = |b: &[u8]| conn.write_all(b).is_ok();
    match mode {
        "endless" => while send(&delta("\"more \"")) {},
        "stall" => {
            send(&delta("\"Half\""));
            std::thread::sleep(Duration::from_secs(600));
        }
        "longline" => {
            send(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"");
            let filler = vec![b'a'; 1 << 20];
            for _ in 0..60 {
                if !send(&filler) {
                    return;
                }
            }
        }
        "escapes" => {
            send(&delta(
                "\"safe \\u001b]52;c;cHduZWQ=\\u0007 \\u001b[31mred\\u009b2J \\u202eevil\"",
            ));
            send(&delta(&format!("\"your key: {}\"", &KEY[..7])));
            send(&delta(&format!("\"{}\"", &KEY[7..])));
            send(FINISH.as_bytes());
            send(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":-3}}\n\n");
            send(b"data: [DONE]\n\n");
        }
        "badutf8" => {
            send(&delta("\"fine\""));
            send(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n");
        }
        "usage" => {
            send(&delta("\"Hello\""));
            send(FINISH.as_bytes());
            send(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":\"many\",\"completion_tokens\":2}}\n\n");
            send(b"data: [DONE]\n\n");
        }
        _ => {}
    }
}

/// `gemma-chat --prompt MODE-<mode>` against the server on `port`.
fn run(port: u16, mode: &str) -> (Output, Duration) {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("config.toml");
    let config = format!(
        "[engine]\nkind = \"remote\"\nurl = \"http://127.0.0.1:{port}\"\napi_key_env = \"HOSTILE_KEY\"\n\
         idle_timeout_s = 2\nfirst_byte_timeout_s = 5\nconnect_timeout_s = 2\n"
    );
    std::fs::write(&file, config).expect("config");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .arg("--config")
        .arg(&file)
        .args([
            "--prompt",
            &format!("MODE-{mode}"),
            "--max-new-tokens",
            "64",
        ])
        .env("HOSTILE_KEY", KEY)
        .env("GEMMA_CHAT_DATA_DIR", dir.path().join("data"))
        .output()
        .expect("runs");
    (out, started.elapsed())
}

/// The run ended well enough: exit 0 or 1, in time, nothing raw, no key.
fn check(mode: &str, out: &Output, took: Duration) -> (String, String) {
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "{mode}: exit {code:?}\nstdout: {o}\nstderr: {e}"
    );
    assert!(took < Duration::from_secs(60), "{mode}: took {took:?}");
    for (name, text) in [("stdout", &o), ("stderr", &e)] {
        assert!(
            !text.contains(|c: char| gemma_engine::protocol::text::is_unsafe(c)),
            "{mode}: a control character on {name}: {text:?}"
        );
        assert!(!text.contains(KEY), "{mode}: the key on {name}: {text}");
    }
    (o, e)
}

#[test]
fn a_hostile_stream_ends_the_turn_cleanly() {
    let port = server(Start::Plain);
    let (out, took) = run(port, "endless");
    let (o, e) = check("endless", &out, took);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(o.starts_with("more more"), "{o}");
    assert!(
        e.contains("more text than the answer's token limit allows"),
        "{e}"
    );

    let (out, took) = run(port, "stall");
    let (o, e) = check("stall", &out, took);
    assert!(o.starts_with("Half"), "{o}");
    assert!(e.contains("went silent for 2 s"), "{e}");

    let (out, took) = run(port, "longline");
    let (_, e) = check("longline", &out, took);
    assert!(e.contains("an event line over 4194304 bytes"), "{e}");

    let (out, took) = run(port, "bigerror");
    let (_, e) = check("bigerror", &out, took);
    assert!(
        e.contains("HTTP 500") && e.contains("bad key [API key]"),
        "{e}"
    );

    let (out, took) = run(port, "badutf8");
    let (o, e) = check("badutf8", &out, took);
    assert!(o.starts_with("fine"), "{o}");
    assert!(e.contains("not UTF-8") && !e.contains("connection"), "{e}");
}

#[test]
fn escapes_keys_and_absurd_numbers_are_tamed() {
    let port = server(Start::Plain);
    let (out, took) = run(port, "escapes");
    let (o, e) = check("escapes", &out, took);
    assert_eq!(out.status.code(), Some(0), "{e}");
    assert!(o.contains("your key: [API key]"), "{o}");
    assert!(o.contains("red") && o.contains("evil"), "{o}");
    // The absurd slot count and context are not believed; the bad usage is a note, not a failure.
    assert!(e.contains("llama-server, 256 slots"), "{e}");
    assert!(e.contains("usage numbers are not counts"), "{e}");

    let (out, took) = run(port, "usage");
    let (o, e) = check("usage", &out, took);
    assert_eq!(out.status.code(), Some(0), "{e}");
    assert_eq!(o.trim(), "Hello");
    assert!(e.contains("prompt_tokens = \"many\""), "{e}");
}

#[test]
fn a_hostile_model_list_fails_start_up_in_time() {
    let (out, took) = run(server(Start::HugeList), "none");
    let (_, e) = check("huge list", &out, took);
    assert_eq!(out.status.code(), Some(1));
    assert!(e.contains("over 8192 KiB"), "{e}");

    let (out, took) = run(server(Start::StallList), "none");
    let (_, e) = check("stalled list", &out, took);
    assert_eq!(out.status.code(), Some(1));
    assert!(e.contains("gave up after"), "{e}");

    // Nobody listens: headless gives up after the idle time-out rather than waiting for ever.
    let port = crate::common::llama::free_port();
    let (out, took) = run(port, "none");
    let (_, e) = check("dead", &out, took);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        e.contains("cannot reach") && e.contains("gave up after"),
        "{e}"
    );
}
