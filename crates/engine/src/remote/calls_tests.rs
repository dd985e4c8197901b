//! The remote engine's tool calls: deltas read from what servers send, pieces made whole calls
//! by index or id, a hostile stream bounded, arguments read as JSON then leniently, and a round
//! trip written back as an assistant message and tool messages.

use super::*;

fn delta(
    index: Option<u64>,
    id: Option<&str>,
    name: Option<&str>,
    args: Option<&str>,
) -> CallDelta {
    CallDelta {
        index,
        id: id.map(str::to_string),
        name: name.map(str::to_string),
        arguments: args.map(str::to_string),
    }
}

#[test]
fn deltas_are_read_from_what_servers_send() {
    let v = serde_json::json!([
        {"index": 0, "id": "c1", "type": "function",
         "function": {"name": "forecast", "arguments": ""}},
        {"index": 1, "function": {"arguments": {"city": "Paris"}}},
        "not a call",
        {"index": "x", "id": 7, "function": {"name": ["no"]}},
    ]);
    let d = call_deltas(&v);
    assert_eq!(
        d,
        vec![
            delta(Some(0), Some("c1"), Some("forecast"), Some("")),
            delta(Some(1), None, None, Some(r#"{"city":"Paris"}"#)),
        ]
    );
    // One object stands for a list of one; anything else is no call.
    assert_eq!(call_deltas(&serde_json::json!({"index": 2})).len(), 1);
    assert!(call_deltas(&serde_json::json!("calls")).is_empty());
}

#[test]
fn pieces_make_whole_calls_by_index_or_by_id() {
    let mut c = Calls::default();
    for d in [
        delta(Some(0), Some("a"), Some("forecast"), Some("{\"ci")),
        delta(Some(1), Some("b"), Some("now"), None),
        delta(Some(0), None, None, Some("ty\": \"Paris\"}")),
        delta(Some(1), Some("ignored"), Some("ignored"), Some("{}")),
    ] {
        c.push(d).expect("within bounds");
    }
    let calls = c.finish();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("a", "forecast")
    );
    assert_eq!(calls[0].arguments, "{\"city\": \"Paris\"}");
    assert_eq!((calls[1].id.as_str(), calls[1].name.as_str()), ("b", "now"));
    // Without indexes: a new id is a new call, no id more of the last one.
    let mut c = Calls::default();
    for d in [
        delta(None, Some("x"), Some("f"), Some("{")),
        delta(None, None, None, Some("}")),
        delta(None, Some("y"), Some("g"), None),
    ] {
        c.push(d).expect("within bounds");
    }
    let calls = c.finish();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].arguments, "{}");
}

#[test]
fn a_hostile_stream_of_calls_is_bounded() {
    let mut c = Calls::default();
    for i in 0..MAX_CALLS as u64 {
        c.push(delta(Some(i), None, Some("f"), None))
            .expect("within");
    }
    let e = c.push(delta(Some(999), None, Some("f"), None));
    assert!(e.expect_err("too many").contains("more than"));
    // Arguments past the limit are dropped and mark the call; ids and names are cut.
    let mut c = Calls::default();
    let big = "x".repeat(MAX_ARGUMENTS / 2 + 1);
    let long = "é".repeat(MAX_ID);
    for _ in 0..3 {
        c.push(delta(Some(0), Some(&long), Some(&long), Some(&big)))
            .expect("one call");
    }
    let calls = c.finish();
    assert!(calls[0].oversized && calls[0].arguments.len() <= MAX_ARGUMENTS);
    assert!(calls[0].name.len() <= MAX_ID);
    let a = attempt(&calls[0]);
    assert!(a.arguments.expect_err("oversized").contains("KiB"));
    // Ids that are missing, odd or taken are made up, never shared.
    let mut c = Calls::default();
    for d in [
        delta(Some(0), Some("same"), Some("f"), None),
        delta(Some(1), Some("same"), Some("f"), None),
        delta(Some(2), Some("bad\u{1b}id"), Some("f"), None),
        delta(Some(3), None, Some("f"), None),
    ] {
        c.push(d).expect("within");
    }
    let ids: Vec<String> = c.finish().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, ["same", "call_1", "call_2", "call_3"]);
}

fn wire(name: &str, args: &str) -> WireCall {
    WireCall {
        id: "c".into(),
        name: name.into(),
        arguments: args.into(),
        ..WireCall::default()
    }
}

#[test]
fn arguments_are_read_as_json_then_leniently() {
    let ok = |name: &str, args: &str| {
        let a = attempt(&wire(name, args));
        (a.name, Value::Object(a.arguments.expect("reads")))
    };
    let want = serde_json::json!({"city": "Paris", "days": 2});
    assert_eq!(ok("forecast", r#"{"city":"Paris","days":2}"#).1, want);
    // Encoded twice, in Gemma's syntax, with single quotes and a trailing comma.
    assert_eq!(
        ok("forecast", r#""{\"city\":\"Paris\",\"days\":2}""#).1,
        want
    );
    assert_eq!(ok("forecast", "{city:<|\"|>Paris<|\"|>,days:2}").1, want);
    assert_eq!(ok("forecast", "{'city': 'Paris', 'days': 2,}").1, want);
    // No arguments at all.
    assert_eq!(ok("now", "").1, serde_json::json!({}));
    assert_eq!(ok("now", "null").1, serde_json::json!({}));
    // A name with characters no tool has is cleaned (and so names no declared tool).
    assert_eq!(ok("fore\u{1b}[31mcast", "{}").0, "fore__31mcast");
    let bad = attempt(&wire("forecast", "[1, 2]"));
    assert!(
        bad.arguments
            .expect_err("not an object")
            .contains("not an object")
    );
    let bad = attempt(&wire("forecast", "{\"city\": "));
    assert!(bad.arguments.is_err());
    let nameless = attempt(&wire("  ", "{}"));
    assert_eq!(nameless.name, "?");
    assert!(nameless.arguments.is_err());
}

#[test]
fn a_round_trip_is_an_assistant_message_and_tool_messages() {
    let calls = vec![
        (
            wire("forecast", "{\"city\":\"Paris\"}"),
            attempt(&wire("forecast", "{\"city\":\"Paris\"}")),
        ),
        (
            WireCall {
                id: "d".into(),
                ..wire("forecast", "{")
            },
            attempt(&wire("forecast", "{")),
        ),
    ];
    let m = round_messages("Let me look.", &calls, &[Some("sunny".into()), None]);
    assert_eq!(
        m,
        vec![
            serde_json::json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c", "type": "function",
                 "function": {"name": "forecast", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "d", "type": "function",
                 "function": {"name": "forecast", "arguments": "{}"}},
            ]}),
            serde_json::json!({"role": "tool", "tool_call_id": "c", "name": "forecast",
                               "content": "sunny"}),
            serde_json::json!({"role": "tool", "tool_call_id": "d", "name": "forecast",
                               "content": ""}),
        ]
    );
}

/// A call refused (past the turn's limit, arguments that do not read) keeps what it sent: it is
/// shown with it, and the round trip gives it back to the server when it is a JSON object.
#[test]
fn a_refused_call_keeps_what_it_sent() {
    let sent = r#"{"city":"Oslo","days":1}"#;
    let mut a = attempt(&wire("forecast", sent));
    a.arguments = Err("over the limit".into());
    assert_eq!(a.raw, sent);
    let m = round_messages("", &[(wire("forecast", sent), a)], &[None]);
    assert_eq!(m[0]["tool_calls"][0]["function"]["arguments"], sent);
    let bad = attempt(&wire("forecast", " {\"city\": "));
    assert_eq!(bad.raw, "{\"city\":");
    let huge = attempt(&wire("forecast", &"é".repeat(10_000)));
    assert!(huge.raw.ends_with('…') && huge.raw.len() <= crate::tools::run::RAW_SHOWN + 3);
}

#[test]
fn an_answer_that_called_tools_is_sent_again_as_its_round_trips() {
    use crate::protocol::{CallMade, CallResponse};
    let made = |handover, text: &str, structured: Option<&str>| CallMade {
        name: "f".into(),
        arguments: r#"{"a":1}"#.into(),
        at: 5,
        handover,
        response: Some(CallResponse {
            text: text.into(),
            structured: structured.map(Into::into),
        }),
        ..CallMade::default()
    };
    let calls = [made(0, "one", None), made(1, "x", Some(r#"{"t":2}"#))];
    let m = rebuilt_replies("Hello there", &calls);
    let roles: Vec<&str> = m.iter().map(|v| v["role"].as_str().unwrap_or("")).collect();
    assert_eq!(
        roles,
        ["assistant", "tool", "assistant", "tool", "assistant"]
    );
    assert_eq!(m[0]["content"], "Hello");
    assert_eq!(m[0]["tool_calls"][0]["function"]["arguments"], r#"{"a":1}"#);
    assert_eq!(m[1]["tool_call_id"], m[0]["tool_calls"][0]["id"]);
    assert_eq!(m[1]["content"], "one");
    assert_eq!(m[2]["content"], "");
    assert_eq!(m[3]["content"], r#"{"t":2}"#);
    assert_eq!(m[4]["content"], " there");
    assert!(rebuilt_replies("Plain.", &[]).is_empty());
}
