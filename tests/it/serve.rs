//! `gemma-chat serve` on the demo model, through HTTP on 127.0.0.1 as clients speak it: whole and
//! streamed answers, a follow-up that re-sends the history and finds it resident
//! (`cached_tokens`), errors that name the field, bodies over the limit, a full queue, a key, a
//! client that leaves mid-answer, four clients on two slots that each get what they would get
//! alone, and gemma-chat's own remote engine as a client.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use burn::tensor::Device;
use gemma_engine::protocol::{Event, TabSettings};
use gemma_engine::{EngineOptions, spawn};
use gemma_model::checkpoint::load;
use gemma_model::demo;
use gemma_model::model::ComputeDtype;
use gemma_serve::{Running, ServeOptions};
use serde_json::{Value, json};

use crate::common::chat::first_after_loading;
use crate::common::http::http;

/// A server on the demo model (greedy, 16 tokens an answer by default), on a free port.
pub(crate) fn server(
    slots: usize,
    queue: usize,
    api_key: Option<&str>,
    max_body: usize,
) -> Running {
    server_with(EngineOptions::default(), (slots, queue), api_key, max_body)
}

/// A server on the demo model (one slot) that tells clients a context of `context_length`
/// tokens (`/v1/models`), whatever the engine's.
pub(crate) fn server_telling(context_length: usize) -> Running {
    let (h, _) = demo_engine(EngineOptions::default());
    serve(h, context_length, (1, 4), None, 1 << 20)
}

/// [`server`] with the engine's `options`.
fn server_with(
    options: EngineOptions,
    (slots, queue): (usize, usize),
    api_key: Option<&str>,
    max_body: usize,
) -> Running {
    let (h, context_length) = demo_engine(options);
    serve(h, context_length, (slots, queue), api_key, max_body)
}

/// The demo model's engine with `options`, ready, and its context.
fn demo_engine(options: EngineOptions) -> (gemma_engine::EngineHandle, usize) {
    let path = demo::ensure(&mut demo::print_progress()).expect("demo model");
    let h = spawn(options, move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    });
    match first_after_loading(&h) {
        Event::Ready { context_length, .. } => (h, context_length),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_conversation_that_leaves_its_slot_is_parked_on_disk_and_comes_back_warm() {
    let dir = tempfile::tempdir().expect("dir");
    let engine = EngineOptions {
        kv_dir: Some(dir.path().join("kv")),
        convo_dir: Some(dir.path().join("conversations")),
        kv_disk_bytes: 256 << 20,
        ..EngineOptions::default()
    };
    // One slot: each new conversation takes it from the one before.
    let running = server_with(engine, (1, 4), None, 1 << 20);
    let addr = running.addr();
    let a = json!([{"role": "user", "content": "The capital of France is"}]);
    let first = ask(addr, a.clone());
    let held = first["usage"]["total_tokens"].as_u64().expect("tokens");
    let other = ask(
        addr,
        json!([{"role": "user", "content": "Write a list of fruit:"}]),
    );
    // (Only the template's opening is shared.)
    let shared = other["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert!(shared < first["usage"]["prompt_tokens"].as_u64(), "{other}");
    let parked = std::fs::read_dir(dir.path().join("kv"))
        .expect("kv")
        .count();
    assert_eq!(parked, 1, "the first conversation's KV state is on disk");
    // Its client comes back with the history: it is brought back, not prefilled again.
    let follow = json!([a[0], {"role": "assistant", "content": content(&first)},
                        {"role": "user", "content": "And of Italy?"}]);
    let back = ask(addr, follow);
    let cached = back["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(
        cached + 1 >= held,
        "{cached} of the {held} tokens it held: {back}"
    );
}

/// Serves the ready engine `h` on a free port.
pub(crate) fn serve(
    h: gemma_engine::EngineHandle,
    context_length: usize,
    slots: (usize, usize),
    api_key: Option<&str>,
    max_body: usize,
) -> Running {
    let options = options(context_length, slots, api_key, max_body);
    gemma_serve::bind(options).expect("bound").spawn(h)
}

/// A server's options for tests: loopback, a free port, greedy, 16 tokens an answer.
pub(crate) fn options(
    context_length: usize,
    (slots, queue): (usize, usize),
    api_key: Option<&str>,
    max_body: usize,
) -> ServeOptions {
    let media = tempfile::tempdir().expect("dir").keep();
    ServeOptions {
        host: "127.0.0.1".into(),
        port: 0,
        slots,
        parallel: slots,
        queue,
        api_key: api_key.map(String::from),
        max_body,
        max_media: 4,
        model: "gemma-3-270m".into(),
        context_length,
        can_think: false,
        can_call_tools: false,
        budgets: [64, 128, 256],
        base: TabSettings {
            max_new_tokens: 16,
            ..TabSettings::default()
        },
        media_dir: media,
        fetch: None,
    }
}

pub(crate) fn post(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, _, text) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        &["Content-Type: application/json"],
        body.to_string().as_bytes(),
    );
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text})),
    )
}

fn ask(addr: SocketAddr, messages: Value) -> Value {
    let (status, v) = post(
        addr,
        &json!({"model": "gemma-3-270m", "messages": messages}),
    );
    assert_eq!(status, 200, "{v}");
    v
}

/// The chunks of a streamed answer to `body` (an event stream ending in `[DONE]`).
pub(crate) fn streamed(addr: SocketAddr, body: &Value) -> Vec<Value> {
    let (status, head, text) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{text}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    let datas: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(datas.last(), Some(&"[DONE]"), "{text}");
    datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("json"))
        .collect()
}

pub(crate) fn content(v: &Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

/// A streamed answer's text, its events and its usage.
fn stream(addr: SocketAddr, messages: Value) -> (String, Vec<Value>) {
    let body =
        json!({"messages": messages, "stream": true, "stream_options": {"include_usage": true}});
    let events = streamed(addr, &body);
    let said: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    (said, events)
}

#[test]
fn answers_whole_and_streamed_and_a_follow_up_finds_its_history_resident() {
    let running = server(2, 8, None, 1 << 20);
    let addr = running.addr();
    let (s, _, h) = http(addr, "GET", "/health", &[], b"");
    assert_eq!((s, h.as_str()), (200, r#"{"status":"ok"}"#));
    let (s, _, m) = http(addr, "GET", "/v1/models", &[], b"");
    assert_eq!(s, 200);
    let m: Value = serde_json::from_str(&m).expect("json");
    assert_eq!(m["data"][0]["id"], "gemma-3-270m");
    assert!(
        m["data"][0]["max_model_len"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );

    let first = json!([{"role": "user", "content": "The capital of France is"}]);
    let v = ask(addr, first.clone());
    let answer = content(&v);
    assert!(!answer.is_empty());
    assert_eq!(
        v["choices"][0]["finish_reason"], "length",
        "16 tokens, no end"
    );
    assert_eq!(v["usage"]["completion_tokens"], 16);
    let prompt = v["usage"]["prompt_tokens"].as_u64().expect("prompt tokens");
    // The same question streamed (greedy, a fresh conversation on the other slot): same text.
    let (said, events) = stream(
        addr,
        json!([{"role": "user", "content": "The capital of France is"}]),
    );
    assert_eq!(said, answer);
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let finish: Vec<&Value> = events
        .iter()
        .filter(|e| !e["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(
        events.last().expect("usage")["usage"]["completion_tokens"],
        16
    );
    // A client that re-sends the whole history: only the new message is prefilled.
    let follow = json!([
        {"role": "user", "content": "The capital of France is"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And of Italy?"},
    ]);
    let v = ask(addr, follow);
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(
        cached >= prompt,
        "cached {cached} of a history of {prompt}: {v}"
    );
}

#[test]
fn bad_requests_get_errors_that_name_the_field() {
    let running = server(1, 0, Some("sesame"), 4096);
    let addr = running.addr();
    let auth = "Authorization: Bearer sesame";
    let (s, _, b) = http(addr, "POST", "/v1/chat/completions", &[], b"{}");
    assert_eq!(s, 401, "{b}");
    let (s, _, b) = http(
        addr,
        "GET",
        "/v1/models",
        &["Authorization: Bearer nope"],
        b"",
    );
    assert_eq!(s, 401, "{b}");
    for (body, field) in [
        (&b"{\"messages\": ["[..], "body"),
        (
            br#"{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}"#,
            "temperature",
        ),
        (
            br#"{"messages": [{"role": "user", "content": "hi"}], "n": 3}"#,
            "n",
        ),
        // The demo model does not think, nor call tools.
        (
            br#"{"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low"}"#,
            "reasoning_effort",
        ),
        (
            br#"{"messages": [{"role": "user", "content": "hi"}],
                 "tools": [{"type": "function", "function": {"name": "f"}}]}"#,
            "tools",
        ),
    ] {
        let (s, _, b) = http(addr, "POST", "/v1/chat/completions", &[auth], body);
        assert_eq!(s, 400, "{b}");
        let v: Value = serde_json::from_str(&b).expect("json error");
        assert_eq!(v["error"]["param"], field, "{b}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let big = vec![b'x'; 10_000];
    let (s, _, b) = http(addr, "POST", "/v1/chat/completions", &[auth], &big);
    assert_eq!(s, 413, "{b}");
    assert!(b.contains("\"error\""), "{b}");
    let (s, _, b) = http(addr, "GET", "/v2/nothing", &[auth], b"");
    assert_eq!(s, 404, "{b}");
    // One slot, no queue: a second request while the first answers is told to come back.
    let long = json!({"messages": [{"role": "user", "content": "Count:"}],
                      "max_tokens": 4000, "stream": true});
    let mut c = TcpStream::connect(addr).expect("connect");
    let b = long.to_string();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    )
    .expect("write");
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        r.read_line(&mut line).expect("a chunk");
    }
    let hi = || {
        http(
            addr,
            "POST",
            "/v1/chat/completions",
            &[auth],
            br#"{"messages": [{"role": "user", "content": "hi"}]}"#,
        )
    };
    let (s, head, b) = hi();
    assert_eq!(s, 503, "{b}");
    assert!(head.contains("retry-after"), "{head}");
    // The first client leaves mid-answer: its turn is cancelled within a step and the slot
    // serves again (a 300-token answer would hold it for seconds; this waits at most 10).
    drop(r);
    drop(c);
    let left = std::time::Instant::now();
    loop {
        let (s, _, b) = hi();
        if s == 200 {
            break;
        }
        assert_eq!(s, 503, "{b}");
        assert!(
            left.elapsed() < Duration::from_secs(5),
            "the slot stayed taken"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn four_clients_on_two_slots_each_get_what_they_would_alone() {
    let running = server(2, 8, None, 1 << 20);
    let addr = running.addr();
    let prompts = [
        "Once upon a time",
        "The best way to cook rice",
        "In 1969,",
        "My favourite colour",
    ];
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| content(&ask(addr, json!([{"role": "user", "content": p}]))))
        .collect();
    let together: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = prompts
            .iter()
            .map(|p| s.spawn(move || content(&ask(addr, json!([{"role": "user", "content": p}])))))
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a client"))
            .collect()
    });
    assert_eq!(together, alone);
}

#[test]
fn gemma_chats_remote_engine_is_a_client() {
    let running = server(1, 4, None, 1 << 20);
    let addr = running.addr();
    let h = gemma_engine::spawn_remote(crate::common::remote_tools::options(
        format!("http://{addr}"),
        None,
    ));
    let model = match first_after_loading(&h) {
        Event::Ready { model, .. } => model,
        other => panic!("unexpected {other:?}"),
    };
    assert!(
        model.contains("gemma-3-270m") && model.contains("gemma-chat serve"),
        "{model}"
    );
    crate::common::chat::configure(
        &h,
        1,
        TabSettings {
            max_new_tokens: 8,
            ..TabSettings::default()
        },
    );
    h.send(gemma_engine::protocol::Command::Submit {
        tab: 1,
        text: "The capital of France is".into(),
        images: Vec::new(),
    });
    let mut text = String::new();
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("an event")
        {
            Event::Token { text: t, .. } => text.push_str(&t),
            Event::Finished { stats, .. } => {
                assert_eq!(stats.generated_tokens, 8);
                break;
            }
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    let direct = content(&ask(
        addr,
        json!([{"role": "user", "content": "The capital of France is"}]),
    ));
    assert_eq!(
        text,
        direct
            .chars()
            .take(text.chars().count())
            .collect::<String>()
    );
}
