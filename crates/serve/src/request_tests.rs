//! Requests as clients send them, and the errors that name the field at fault.

use super::*;
use base64::Engine as _;

fn ok(v: serde_json::Value) -> ChatRequest {
    parse(v.to_string().as_bytes(), 4, false).expect("a valid request")
}

fn err(v: serde_json::Value) -> ApiError {
    parse(v.to_string().as_bytes(), 4, false).expect_err("an invalid request")
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
            "tools[0].function",
        ),
        (
            serde_json::json!({"messages": m, "response_format": {"type": "xml"}}),
            "response_format.type",
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
            "messages[0].tool_call_id",
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
    let not_json = parse(b"{\"messages\": [", 4, false).expect_err("truncated");
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

/// An assistant's call as a client sends it back.
fn call(id: &str, args: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "type": "function",
                       "function": {"name": "weather", "arguments": args}})
}

#[test]
fn tool_calls_and_results_join_their_answer_where_they_were_made() {
    let messages = serde_json::json!([
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Let me look.",
         "tool_calls": [call("a", r#"{"city": "Paris"}"#), call("b", r#"{"city":"Rome"}"#)]},
        {"role": "tool", "tool_call_id": "b", "content": "18"},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "21"}]},
        {"role": "assistant", "content": " Paris 21,", "tool_calls": [call("c", "{}")]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "assistant", "content": " Rome 18."},
        {"role": "user", "content": "Thanks"},
    ]);
    let r = ok(serde_json::json!({ "messages": messages }));
    assert!(!r.continues);
    assert_eq!(r.last.text, "Thanks");
    let ex = &r.history[0];
    assert_eq!(ex.answer, "Let me look. Paris 21, Rome 18.");
    let placed: Vec<_> = ex
        .calls
        .iter()
        .map(|c| (c.id.as_str(), c.at, c.handover, c.response.as_deref()))
        .collect();
    assert_eq!(
        placed,
        vec![
            ("a", 12, 0, Some("21")),
            ("b", 12, 0, Some("18")),
            ("c", 22, 1, Some("ok"))
        ]
    );
    // Arguments are kept as compact JSON, whatever the client's spacing.
    assert_eq!(ex.calls[0].arguments, r#"{"city":"Paris"}"#);
    // Ending with a result: the model answers on from it.
    let on = ok(serde_json::json!({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [call("a", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
    ]}));
    assert!(on.continues);
    assert_eq!(on.history.len(), 1);
    assert_eq!(on.history[0].calls[0].response.as_deref(), Some("sunny"));
}

#[test]
fn a_call_without_its_result_or_a_result_without_its_call_is_named() {
    let asked = serde_json::json!({"role": "assistant", "tool_calls": [call("a", "{}")]});
    let cases = [
        (
            serde_json::json!([{"role": "user", "content": "x"}, asked,
                               {"role": "user", "content": "y"}]),
            "messages[2]",
        ),
        (
            serde_json::json!([{"role": "user", "content": "x"}, asked,
                               {"role": "tool", "tool_call_id": "z", "content": "1"}]),
            "messages[2].tool_call_id",
        ),
        (
            serde_json::json!([{"role": "user", "content": "x"},
                               {"role": "assistant", "tool_calls": [call("a", "[1]")]}]),
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            serde_json::json!([{"role": "user", "content": "x"},
                               {"role": "assistant", "tool_calls": [call("a", "{}"),
                                                                    call("a", "{}")]}]),
            "messages[1].tool_calls[1].id",
        ),
        (
            serde_json::json!([{"role": "user", "content": "x"}, asked]),
            "messages",
        ),
    ];
    for (messages, field) in cases {
        let e = err(serde_json::json!({ "messages": messages }));
        assert_eq!(e.param.as_deref(), Some(field), "{messages}: {}", e.message);
    }
}

#[test]
fn a_picture_url_is_taken_only_where_fetching_is_on_and_must_be_a_picture() {
    let body = serde_json::json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}},
        {"type": "text", "text": "What is it?"}]}]});
    let off = err(body.clone());
    assert_eq!(
        off.param.as_deref(),
        Some("messages[0].content[0].image_url.url")
    );
    assert!(off.message.contains("fetch_images"), "{}", off.message);
    let on = parse(body.to_string().as_bytes(), 4, true).expect("taken");
    let pending = &on.last.media[0];
    assert_eq!(
        pending.url.as_ref().map(|u| u.0.as_str()),
        Some("https://example.com/a.png")
    );
    assert_eq!(pending.tokens, 1120);
    let png = pending
        .fetched(b"\x89PNG\r\n\x1a\nrest".to_vec())
        .expect("a PNG");
    assert_eq!(
        (png.ext, png.url.is_none(), png.digest.len()),
        ("png", true, 64)
    );
    let html = pending
        .fetched(b"<html>".to_vec())
        .expect_err("not a picture");
    assert_eq!(
        html.param.as_deref(),
        Some("messages[0].content[0].image_url.url")
    );
}
