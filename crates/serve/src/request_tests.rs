//! Requests as clients send them, and the errors that name the field at fault.

use super::*;
use base64::Engine as _;

fn ok(v: serde_json::Value) -> ChatRequest {
    parse(v.to_string().as_bytes(), 4).expect("a valid request")
}

fn err(v: serde_json::Value) -> ApiError {
    parse(v.to_string().as_bytes(), 4).expect_err("an invalid request")
}

#[test]
fn a_conversation_becomes_a_system_prompt_exchanges_and_the_last_message() {
    let r = ok(serde_json::json!({
        "model": "x", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": [{"type": "text", "text": "What is"},
                                         {"type": "text", "text": "2+2?"}]},
        ],
        "temperature": 0.5, "top_p": 0.9, "seed": -1, "max_tokens": 7, "stop": "END",
        "reasoning_effort": "low", "n": 1, "tools": [], "logprobs": false,
        "presence_penalty": 0,
    }));
    assert!(r.stream && r.include_usage);
    assert_eq!(r.system.as_deref(), Some("Be brief."));
    assert_eq!(r.history.len(), 1);
    assert_eq!(
        (
            r.history[0].user.text.as_str(),
            r.history[0].answer.as_str()
        ),
        ("Hi", "Hello!")
    );
    assert_eq!(r.last.text, "What is\n\n2+2?");
    assert_eq!(
        (r.temperature, r.top_p, r.max_tokens),
        (Some(0.5), Some(0.9), Some(7))
    );
    assert_eq!(r.seed, Some(u64::MAX));
    assert_eq!(r.stop, vec!["END".to_string()]);
    assert_eq!(r.effort, Some(Effort::Low));
}

#[test]
fn pictures_and_recordings_come_as_data() {
    let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
    let r = ok(
        serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}"),
                                                "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": png, "format": "wav"}},
            {"type": "text", "text": "What is this?"},
        ]}]}),
    );
    assert_eq!(r.last.media.len(), 2);
    assert_eq!((r.last.media[0].ext, r.last.media[0].tokens), ("png", 70));
    assert_eq!(r.last.media[0].bytes, b"\x89PNG fake");
    assert_eq!(r.last.media[1].kind, MediaKind::Audio);
}

#[test]
fn every_error_names_its_field() {
    let m = serde_json::json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (serde_json::json!([1]), "body"),
        (serde_json::json!({"messages": "hi"}), "messages"),
        (
            serde_json::json!({"messages": m, "temperature": 3}),
            "temperature",
        ),
        (
            serde_json::json!({"messages": m, "max_tokens": 0}),
            "max_tokens",
        ),
        (serde_json::json!({"messages": m, "n": 2}), "n"),
        (
            serde_json::json!({"messages": m, "tools": [{"type": "function"}]}),
            "tools",
        ),
        (
            serde_json::json!({"messages": m, "response_format": {"type": "json_object"}}),
            "response_format",
        ),
        (serde_json::json!({"messages": m, "stop": [1]}), "stop"),
        (
            serde_json::json!({"messages": m, "stream": "yes"}),
            "stream",
        ),
        (
            serde_json::json!({"messages": m, "reasoning_effort": "max"}),
            "reasoning_effort",
        ),
        (
            serde_json::json!({"messages": [{"role": "assistant", "content": "hi"}]}),
            "messages",
        ),
        (
            serde_json::json!({"messages": [{"role": "robot", "content": "hi"}]}),
            "messages[0].role",
        ),
        (
            serde_json::json!({"messages": [{"role": "tool", "content": "1"}]}),
            "messages[0].role",
        ),
        (
            serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}),
            "messages[0].content[0].image_url.url",
        ),
        (
            serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "video", "video": {}}]}]}),
            "messages[0].content[0].type",
        ),
        (
            serde_json::json!({"messages": [{"role": "user", "content": "a"},
                                         {"role": "system", "content": "late"},
                                         {"role": "user", "content": "b"}]}),
            "messages[1].role",
        ),
    ];
    for (body, field) in cases {
        let e = err(body.clone());
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        assert!(!e.message.is_empty());
    }
    let not_json = parse(b"{\"messages\": [", 4).expect_err("truncated");
    assert_eq!(not_json.param.as_deref(), Some("body"));
}

#[test]
fn too_many_pictures_are_refused() {
    let png = base64::engine::general_purpose::STANDARD.encode(b"x");
    let part = serde_json::json!({"type": "image_url",
        "image_url": {"url": format!("data:image/png;base64,{png}")}});
    let body = serde_json::json!({"messages": [{"role": "user",
        "content": vec![part; 5]}]});
    assert_eq!(err(body).param.as_deref(), Some("messages"));
}

#[test]
fn thinking_comes_as_llama_servers_switch_and_budget_too() {
    let r = ok(
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"enable_thinking": true}, "reasoning_budget_tokens": 32}),
    );
    assert_eq!(
        (r.enable_thinking, r.thought_budget, r.effort),
        (Some(true), Some(32), None)
    );
    let e = err(
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"enable_thinking": "yes"}}),
    );
    assert_eq!(
        e.param.as_deref(),
        Some("chat_template_kwargs.enable_thinking")
    );
}
