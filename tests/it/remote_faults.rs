//! The remote engine against a scripted OpenAI-compatible server on 127.0.0.1 (a stand-in that
//! answers each request as the test says): keep-alive comments and thoughts in the stream, an
//! error object mid-stream, a connection dropped mid-answer, a refused API key (never echoed),
//! a model the server does not serve, and a server that comes up after the app.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::common::llama::free_port;
use gemma_engine::protocol::{Command, Event, Reuse, TurnEnd};
use gemma_engine::{EngineHandle, RemoteOptions, spawn_remote};

const KEY: &str = "sekrit-key-123";

/// Serves 127.0.0.1:`port` until the test ends: `/v1/models` lists `m` (with `max_model_len`
/// 4096), there is no `/props` or `/tokenize`, and a chat request is answered by the script its
/// last user message names.
fn fake_server(port: u16) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn));
        }
    });
}

fn answer(mut conn: TcpStream) {
    let Some((head, body)) = crate::common::http::request(&conn) else {
        return;
    };
    let request = head.first().cloned().unwrap_or_default();
    let authorized = head.iter().any(|h| {
        h.trim() == format!("authorization: Bearer {KEY}")
            || h.trim() == format!("Authorization: Bearer {KEY}")
    });
    let json = |status: &str, text: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )
    };
    if !authorized {
        let _ = conn
            .write_all(json("401 Unauthorized", r#"{"error":{"message":"bad key"}}"#).as_bytes());
        return;
    }
    if request.starts_with("GET /v1/models") {
        let _ = conn.write_all(
            json(
                "200 OK",
                r#"{"object":"list","data":[{"id":"m","max_model_len":4096}]}"#,
            )
            .as_bytes(),
        );
        return;
    }
    if !request.starts_with("POST /v1/chat/completions") {
        let _ = conn.write_all(json("404 Not Found", r#"{"error":"no such endpoint"}"#).as_bytes());
        return;
    }
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    let delta = |d: &str| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{d}}}]}}\n\n");
    let mut send = |s: &str| {
        let _ = conn.write_all(s.as_bytes());
        let _ = conn.flush();
        std::thread::sleep(Duration::from_millis(5));
    };
    let script = body.rsplit("\"content\":\"").next().unwrap_or_default();
    if script.starts_with("comments") {
        send(": keep-alive\n\n");
        send(&delta(
            r#"{"role":"assistant","reasoning_content":"Let me see."}"#,
        ));
        send(": ping\n\n");
        send(&delta(r#"{"reasoning":" Yes."}"#));
        send(&delta(r#"{"content":"Hello"}"#));
        send(&delta(r#"{"content":", world"}"#));
        send("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        send(
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":4,\
             \"prompt_tokens_details\":{\"cached_tokens\":20}}}\n\n",
        );
        send("data: [DONE]\n\n");
    } else if script.starts_with("error") {
        send(&delta(r#"{"content":"Half an"}"#));
        send("data: {\"error\":{\"code\":500,\"message\":\"the GPU ran out of memory\"}}\n\n");
    } else if script.starts_with("count") {
        // How many messages the request carried: the history the engine re-sent.
        let n = body.matches("\"role\"").count();
        send(&delta(&format!("{{\"content\":\"{n}\"}}")));
        send("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        send("data: [DONE]\n\n");
    } else if script.starts_with("seed") {
        // The seed the request carried.
        let seed = body
            .split("\"seed\":")
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .unwrap_or("none");
        send(&delta(&format!("{{\"content\":\"{seed}\"}}")));
        send("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        send("data: [DONE]\n\n");
    } else if script.starts_with("drop") {
        send(&delta(r#"{"content":"Cut"}"#));
        // The connection closes with the thread: no finish, no [DONE].
    }
}

fn options(port: u16, key: Option<&str>, model: Option<&str>) -> RemoteOptions {
    RemoteOptions {
        url: format!("http://127.0.0.1:{port}"),
        model: model.map(str::to_string),
        api_key: key.map(str::to_string),
        connect_timeout: Duration::from_secs(2),
        first_byte_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(10),
        give_up_after: None,
        context_length: None,
        tools: None,
        thinking_message: None,
    }
}

fn next(h: &EngineHandle) -> Event {
    h.events
        .recv_timeout(Duration::from_secs(30))
        .expect("an event")
}

fn ready(h: &EngineHandle) {
    loop {
        match next(h) {
            Event::Loading { .. } => {}
            Event::Ready {
                context_length,
                model,
                ..
            } => {
                assert_eq!(context_length, 4096, "max_model_len");
                assert!(model.contains("OpenAI-compatible"), "{model}");
                // This server has no /tokenize: the meter says it estimates.
                assert!(model.contains("tokens estimated"), "{model}");
                return;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Events of one turn in tab 1, up to its end.
fn turn(h: &EngineHandle, text: &str) -> Vec<Event> {
    h.send(Command::Submit {
        tab: 1,
        text: text.into(),
        images: Vec::new(),
    });
    let mut seen = Vec::new();
    loop {
        let e = next(h);
        let end = matches!(e, Event::Finished { .. } | Event::Failed { .. });
        seen.push(e);
        if end {
            return seen;
        }
    }
}

/// The answer text among `seen`.
fn answer_of(seen: &[Event]) -> String {
    seen.iter()
        .filter_map(|e| match e {
            Event::Token { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The thought text among `seen`.
fn thought_of(seen: &[Event]) -> String {
    seen.iter()
        .filter_map(|e| match e {
            Event::Thought { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn thoughts_comments_and_the_servers_numbers() {
    let port = free_port();
    fake_server(port);
    let h = spawn_remote(options(port, Some(KEY), Some("m")));
    ready(&h);
    let seen = turn(&h, "comments please");
    assert_eq!(thought_of(&seen), "Let me see. Yes.");
    assert_eq!(answer_of(&seen), "Hello, world");
    assert!(
        seen.contains(&Event::Committed { tab: 1, tokens: 34 }),
        "{seen:?}"
    );
    match seen.last() {
        Some(Event::Finished { end, stats, .. }) => {
            assert_eq!(*end, TurnEnd::EndOfTurn(0));
            assert_eq!((stats.reused_tokens, stats.prefilled_tokens), (20, 10));
            assert_eq!(stats.reuse, Reuse::ExactPrefix);
            assert_eq!(stats.generated_tokens, 4);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_error_mid_stream_and_a_dropped_connection_fail_the_turn_and_keep_what_came() {
    let port = free_port();
    fake_server(port);
    let h = spawn_remote(options(port, Some(KEY), None));
    ready(&h);
    for (script, says, kept) in [
        ("error now", "the GPU ran out of memory", "Half an"),
        ("drop now", "lost mid-answer", "Cut"),
    ] {
        let seen = turn(&h, script);
        assert_eq!(answer_of(&seen), kept);
        match seen.last() {
            Some(Event::Failed { error, .. }) => {
                assert!(
                    error.contains(says) && error.contains("127.0.0.1"),
                    "{error}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
    // The tab goes on.
    let seen = turn(&h, "comments again");
    assert!(
        matches!(seen.last(), Some(Event::Finished { .. })),
        "{seen:?}"
    );
}

/// Why the engine on `options` could not start.
fn load_failed(options: RemoteOptions) -> String {
    let h = spawn_remote(options);
    loop {
        match next(&h) {
            Event::Loading { .. } => {}
            Event::LoadFailed { error } => return error,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_refused_key_and_an_unknown_model_say_what_to_do() {
    let port = free_port();
    fake_server(port);
    let error = load_failed(options(port, Some("wrong-key-456"), None));
    assert!(
        error.contains("HTTP 401") && error.contains("api_key_env"),
        "{error}"
    );
    assert!(
        !error.contains("wrong-key-456"),
        "the key is never shown: {error}"
    );
    let error = load_failed(options(port, Some(KEY), Some("gemma-4-31b")));
    assert!(
        error.contains("\"gemma-4-31b\"") && error.contains("it serves: \"m\""),
        "{error}"
    );
    // A key no header can carry (a CR pasted in with it) fails at once, not retried for ever
    // as if the server were down (probe 2026-12-06, E24), and is not shown either.
    let error = load_failed(options(free_port(), Some("key-with-cr-7788\r"), None));
    assert!(
        error.contains("a carriage return") && error.contains("api_key_env"),
        "{error}"
    );
    assert!(!error.contains("key-with-cr-7788"), "{error}");
}

#[test]
fn a_server_that_comes_up_later_is_waited_for() {
    let port = free_port();
    let h = spawn_remote(options(port, Some(KEY), None));
    match next(&h) {
        Event::Loading { stage, .. } => assert!(stage.contains("connecting"), "{stage}"),
        other => panic!("{other:?}"),
    }
    match next(&h) {
        Event::Loading { stage, .. } => {
            assert!(
                stage.contains("is it running?") && stage.contains("retrying"),
                "{stage}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A turn typed meanwhile waits in the UI; the server comes up; the engine is ready.
    fake_server(port);
    ready(&h);
    let seen = turn(&h, "comments");
    assert!(
        matches!(seen.last(), Some(Event::Finished { .. })),
        "{seen:?}"
    );
}

/// What each turn re-sends: the whole history as the transcript shows it; a regenerate replaces
/// the last answer; a failed turn stays in the history (as the transcript keeps it).
#[test]
fn the_history_sent_mirrors_the_transcript() {
    let port = free_port();
    fake_server(port);
    let h = spawn_remote(options(port, Some(KEY), None));
    ready(&h);
    assert_eq!(answer_of(&turn(&h, "count 1")), "1");
    assert_eq!(answer_of(&turn(&h, "count 2")), "3");
    h.send(Command::Regenerate { tab: 1 });
    let mut seen = Vec::new();
    loop {
        let e = next(&h);
        let end = matches!(e, Event::Finished { .. } | Event::Failed { .. });
        seen.push(e);
        if end {
            break;
        }
    }
    assert_eq!(
        answer_of(&seen),
        "3",
        "regenerate re-sends the same history: {seen:?}"
    );
    let failed = turn(&h, "drop it");
    assert!(matches!(failed.last(), Some(Event::Failed { .. })));
    assert_eq!(
        answer_of(&turn(&h, "count 3")),
        "7",
        "the failed turn is in the history"
    );
    // An edit of the second message: the path up to it, then the new text.
    h.send(Command::SetPath {
        tab: 1,
        history: vec![gemma_engine::protocol::Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: "count 1".into(),
            answer: "1".into(),
        }],
    });
    assert_eq!(
        answer_of(&turn(&h, "count 2 again")),
        "3",
        "the edited path is what is sent"
    );
}

/// Each turn, a regenerate too, sends a seed of its own (the same request and seed gave the same
/// answer), within what every server takes; the tab's seed still decides them.
#[test]
fn a_regenerate_sends_a_new_seed() {
    let port = free_port();
    fake_server(port);
    let h = spawn_remote(options(port, Some(KEY), None));
    ready(&h);
    let mut sampling = gemma_engine::protocol::SamplingParams::greedy();
    sampling.seed = u64::MAX;
    let settings = gemma_engine::protocol::TabSettings {
        sampling,
        max_new_tokens: 16,
        ..Default::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    let first: u64 = answer_of(&turn(&h, "seed")).parse().expect("a seed");
    h.send(Command::Regenerate { tab: 1 });
    let mut seen = Vec::new();
    while !matches!(
        seen.last(),
        Some(Event::Finished { .. } | Event::Failed { .. })
    ) {
        seen.push(next(&h));
    }
    let again: u64 = answer_of(&seen).parse().expect("a seed");
    assert_ne!(first, again, "the regenerate's seed is new");
    assert!(first < 1 << 31 && again < 1 << 31, "{first} {again}");
}
