//! Tools on the remote engine, with a real MCP server over stdio (`tests/fixtures/mcp/server.py`)
//! behind them: against a scripted OpenAI-compatible server that streams `tool_calls` deltas,
//! the request carries OpenAI `tools` and the tab's `tool_choice`, a call is approved through
//! `DecideTool` and reaches the MCP server with exactly its arguments, and the next request
//! carries the assistant message with its `tool_calls` and a `role: "tool"` message with the
//! result (and so does every later turn); an undeclared tool, the per-turn limit, too many calls
//! in one answer and Esc while a call waits each end cleanly. Against a real llama-server started
//! with `--jinja`, a `required` call made by the server's own tool-call grammar goes the same way.

use std::sync::{Arc, Mutex};

use gemma_engine::protocol::{Command, ToolChoice, ToolDecision, ToolSelection, TurnEnd};
use serde_json::{Value, json};

use crate::common::http::chat_server;
use crate::common::mcp::logged;
use crate::common::remote_tools::{decide, engine, host, turn};

/// A chunk with a text delta.
fn text(t: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {"content": t}}]}).to_string()
}

/// A chunk with a piece of call `index`.
fn call(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> String {
    let mut c = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        c["id"] = json!(id);
        c["type"] = json!("function");
    }
    if let Some(name) = name {
        c["function"]["name"] = json!(name);
    }
    json!({"choices": [{"index": 0, "delta": {"tool_calls": [c]}}]}).to_string()
}

fn finish(reason: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}).to_string()
}

/// The role and content of a request's last message.
fn last(body: &Value) -> (String, String) {
    let m = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    (s("role"), s("content"))
}

/// The roles of a request's messages.
fn roles(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["role"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Answers a tool result with text; "weather" with a text, a call of `forecast` in two pieces
/// and a call of an undeclared tool; "esc" with one call; anything else with text.
fn weather(body: &Value) -> Vec<String> {
    match last(body) {
        (role, _) if role == "tool" => vec![text("It is sunny."), finish("stop")],
        (_, content) if content.contains("weather") => vec![
            text("Let me check. "),
            call(0, Some("call_a"), Some("forecast"), "{\"city\": \"Par"),
            call(0, None, None, "is\", \"days\": 2}"),
            call(1, Some("call_b"), Some("nope"), "{}"),
            finish("tool_calls"),
        ],
        (_, content) if content.contains("esc") => vec![
            call(
                0,
                Some("call_e"),
                Some("forecast"),
                r#"{"city":"Oslo","days":1}"#,
            ),
            finish("tool_calls"),
        ],
        _ => vec![text("You're welcome."), finish("stop")],
    }
}

type Bodies = Arc<Mutex<Vec<Value>>>;

fn bodies(b: &Bodies) -> Vec<Value> {
    b.lock().expect("bodies").clone()
}

#[test]
fn streamed_calls_run_on_the_mcp_server_and_their_results_go_back_as_tool_messages() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("calls.jsonl");
    let (port, sent) = chat_server(weather);
    let h = engine(port, "m", host(&log, 8), ToolChoice::Required);
    let seen = turn(
        &h,
        "What is the weather in Paris?",
        &mut decide(1, ToolDecision::Once),
    );
    let (end, stats) = seen.end.expect("ends").expect("finished");
    assert_eq!(end, TurnEnd::EndOfTurn(0));
    assert_eq!(seen.answer, "Let me check. It is sunny.");
    // The declared tool asks; the undeclared one fails at once, with an error the model reads.
    let asked: Vec<(&str, &str, bool)> = seen
        .calls
        .iter()
        .map(|(c, a)| (c.name.as_str(), c.server.as_str(), *a))
        .collect();
    assert_eq!(asked, [("forecast", "test", true), ("nope", "", false)]);
    let args: Value = serde_json::from_str(&seen.calls[0].0.arguments).expect("JSON");
    assert_eq!(args, json!({"city": "Paris", "days": 2}));
    assert_eq!(
        logged(&log),
        [json!({"tool": "forecast", "arguments":
        {"city": "Paris", "days": 2, "unit": "celsius"}})]
    );
    let by = |name: &str| {
        seen.results
            .iter()
            .find(|r| r.name == name)
            .expect("a result")
    };
    assert!(by("forecast").ok && by("forecast").text.contains("sunny for 2 days"));
    assert!(!by("nope").ok && by("nope").text.contains("no tool named nope"));
    assert_eq!(stats.tool_calls, 2, "{stats:?}");
    assert!(stats.tool_tokens > 0, "{stats:?}");
    // The first request declares the tools and requires a call; the second goes on after it.
    let b = bodies(&sent);
    assert_eq!(b.len(), 2);
    let names: Vec<&str> = b[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("a name"))
        .collect();
    // Every tool of the server, by name.
    assert!(
        names.contains(&"forecast") && names.contains(&"hang") && names.is_sorted(),
        "{names:?}"
    );
    let forecast = names
        .iter()
        .position(|n| *n == "forecast")
        .expect("declared");
    let decl = &b[0]["tools"][forecast];
    assert_eq!(decl["type"], "function");
    assert!(decl["function"]["parameters"]["properties"]["city"].is_object());
    assert_eq!(
        (b[0]["tool_choice"].as_str(), b[1]["tool_choice"].as_str()),
        (Some("required"), Some("auto"))
    );
    assert_eq!(roles(&b[1]), ["user", "assistant", "tool", "tool"]);
    let m = &b[1]["messages"];
    assert_eq!(m[1]["content"], "Let me check. ");
    assert_eq!(m[1]["tool_calls"][0]["id"], "call_a");
    assert_eq!(m[1]["tool_calls"][0]["function"]["name"], "forecast");
    let sent_args: Value = serde_json::from_str(
        m[1]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .expect("text"),
    )
    .expect("JSON");
    assert_eq!(sent_args, json!({"city": "Paris", "days": 2}));
    assert_eq!(m[2]["tool_call_id"], "call_a");
    assert!(
        m[2]["content"]
            .as_str()
            .expect("text")
            .contains("sunny for 2 days")
    );
    assert_eq!(m[3]["tool_call_id"], "call_b");
    assert!(m[3]["content"].as_str().expect("text").contains("error"));
    // A later turn re-sends the round-trip, then the answer after it.
    let next = turn(&h, "Thanks!", &mut decide(1, ToolDecision::Once));
    assert_eq!(next.answer, "You're welcome.");
    let b = bodies(&sent);
    assert_eq!(
        roles(&b[2]),
        ["user", "assistant", "tool", "tool", "assistant", "user"]
    );
    let first = |b: &Value| b["messages"].as_array().expect("messages")[..4].to_vec();
    assert_eq!(first(&b[2]), first(&b[1]));
    assert_eq!(b[2]["messages"][4]["content"], "It is sunny.");
}

#[test]
fn esc_while_a_call_waits_stops_it_and_the_next_turn_keeps_the_stopped_call() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("calls.jsonl");
    let (port, sent) = chat_server(weather);
    let h = engine(port, "m", host(&log, 8), ToolChoice::Auto);
    let seen = turn(&h, "esc", &mut |_| Command::Cancel { tab: 1 });
    let (end, _) = seen.end.expect("ends").expect("finished");
    assert_eq!(end, TurnEnd::Cancelled);
    assert!(!seen.results[0].ok, "{:?}", seen.results);
    assert!(
        logged(&log).is_empty(),
        "a stopped call never reaches the server"
    );
    assert_eq!(bodies(&sent).len(), 1, "nothing is sent after Esc");
    let next = turn(&h, "Thanks!", &mut decide(1, ToolDecision::Once));
    assert_eq!(next.answer, "You're welcome.");
    let b = bodies(&sent);
    assert_eq!(
        roles(&b[1]),
        ["user", "assistant", "tool", "assistant", "user"]
    );
    assert!(
        b[1]["messages"][2]["content"]
            .as_str()
            .expect("text")
            .contains("stopped")
    );
}

/// Calls `forecast` whatever it is asked, again and again.
fn loops(body: &Value) -> Vec<String> {
    let n = roles(body).iter().filter(|r| *r == "tool").count();
    let id = format!("call_{n}");
    vec![
        call(
            0,
            Some(&id),
            Some("forecast"),
            r#"{"city":"Oslo","days":1}"#,
        ),
        finish("tool_calls"),
    ]
}

#[test]
fn calls_past_the_turns_limit_fail_and_the_turn_ends() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("calls.jsonl");
    let (port, sent) = chat_server(loops);
    let h = engine(port, "m", host(&log, 2), ToolChoice::Auto);
    // "For this tab": the first call asks, the second runs without asking.
    let seen = turn(&h, "Go.", &mut decide(1, ToolDecision::Tab));
    let (end, stats) = seen.end.expect("ends").expect("finished");
    assert_eq!(end, TurnEnd::EndOfTurn(0));
    let approvals: Vec<bool> = seen.calls.iter().map(|(_, a)| *a).collect();
    assert_eq!(approvals, [true, false, false]);
    let oks: Vec<bool> = seen.results.iter().map(|r| r.ok).collect();
    assert_eq!(oks, [true, true, false]);
    assert!(
        seen.results[2].text.contains("limit of 2"),
        "{:?}",
        seen.results[2]
    );
    // The refused call is shown with what it sent, not an empty object (probe F10).
    let sent_args: Vec<&str> = seen
        .calls
        .iter()
        .map(|(c, _)| c.arguments.as_str())
        .collect();
    assert_eq!(sent_args, [r#"{"city":"Oslo","days":1}"#; 3]);
    assert_eq!(stats.tool_calls, 3);
    assert_eq!(logged(&log).len(), 2);
    // Once the limit is reached the model is told no more calls; its third is not re-sent.
    let b = bodies(&sent);
    let choices: Vec<&str> = b
        .iter()
        .map(|b| b["tool_choice"].as_str().expect("set"))
        .collect();
    assert_eq!(choices, ["auto", "auto", "none"]);
    assert_eq!(b[1]["parallel_tool_calls"], false, "one call left");
}

#[test]
fn an_answer_with_too_many_calls_fails_the_turn_not_the_tab() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("calls.jsonl");
    let (port, _) = chat_server(|body| {
        if last(body).1.contains("flood") {
            let mut e: Vec<String> = (0..40)
                .map(|i| call(i, Some(&format!("c{i}")), Some("forecast"), "{}"))
                .collect();
            e.push(finish("tool_calls"));
            e
        } else {
            vec![text("fine"), finish("stop")]
        }
    });
    let h = engine(port, "m", host(&log, 8), ToolChoice::Auto);
    let seen = turn(&h, "flood", &mut decide(1, ToolDecision::Once));
    let error = seen.end.expect("ends").expect_err("fails");
    assert!(error.contains("more than 32 tool calls"), "{error}");
    assert!(seen.calls.is_empty() && logged(&log).is_empty());
    let next = turn(&h, "again", &mut decide(1, ToolDecision::Once));
    assert_eq!(next.answer, "fine");
}

/// The chat requests among what the proxy passed on.
fn chats(passed: &crate::common::http::Passed) -> Vec<Value> {
    let p = passed.lock().expect("passed");
    p.iter()
        .filter(|(line, _)| line.starts_with("POST /v1/chat/completions"))
        .map(|(_, body)| body.clone())
        .collect()
}

#[test]
fn llama_server_with_jinja_makes_a_required_call_that_runs_and_goes_back() {
    use crate::common::llama::{free_port, llama_server};
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("calls.jsonl");
    let model = gemma_model::demo::ensure(&mut gemma_model::demo::print_progress())
        .expect("the demo model");
    let template = crate::common::chat::root().join("assets/templates/gemma4.jinja");
    let port = free_port();
    // The Gemma 4 template: llama-server reads calls as `<|tool_call>call:…` with a grammar of
    // its own, which makes even the 270M base model call when the call is required.
    let args = [
        "--jinja",
        "--chat-template-file",
        &template.to_string_lossy(),
    ];
    let server = llama_server(&model, port, 1, &args, &dir.path().join("server.log"));
    let (proxy_port, passed) = crate::common::http::proxy(port);
    // One call a turn: the server is asked for one (`parallel_tool_calls = false`), then none.
    let h = engine(
        proxy_port,
        "gemma-3-270m",
        host(&log, 1),
        ToolChoice::Required,
    );
    // The engine's settings (64 tokens an answer), the one tool declared.
    let settings = gemma_engine::protocol::TabSettings {
        max_new_tokens: 64,
        tools: ToolSelection::Only(vec!["test.forecast".into()]),
        tool_choice: ToolChoice::Required,
        ..Default::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    // A base model copies: the message shows it the call.
    let ask = "Reply with exactly this call: call:forecast{city:<|\"|>Paris<|\"|>,days:2}";
    let seen = turn(&h, ask, &mut decide(1, ToolDecision::Once));
    let end = seen.end.clone().expect("ends");
    let (_, stats) = end.unwrap_or_else(|e| panic!("{e}\n{}", server.output()));
    assert_eq!(seen.calls.len(), 1, "{seen:?}\n{}", server.output());
    let (call, approval) = &seen.calls[0];
    let named = (call.name.as_str(), call.server.as_str(), *approval);
    assert_eq!(named, ("forecast", "test", true));
    let args: Value = serde_json::from_str(&call.arguments).expect("JSON");
    assert_eq!(args, json!({"city": "Paris", "days": 2}));
    assert_eq!(
        logged(&log),
        [json!({"tool": "forecast", "arguments": {"city": "Paris", "days": 2, "unit": "celsius"}})]
    );
    assert!(seen.results[0].ok, "{:?}", seen.results);
    assert_eq!(stats.tool_calls, 1);
    assert!(stats.tool_tokens > 10, "{stats:?}");
    let b = chats(&passed);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0]["tool_choice"], "required");
    assert_eq!(b[0]["parallel_tool_calls"], false);
    assert_eq!(b[0]["tools"][0]["function"]["name"], "forecast");
    assert_eq!(b[1]["tool_choice"], "none");
    let m = b[1]["messages"].as_array().expect("messages");
    let roles: Vec<&str> = m
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(m[2]["tool_call_id"], m[1]["tool_calls"][0]["id"]);
    let content = m[2]["content"].as_str().expect("text");
    assert!(content.contains("Paris: sunny for 2 days"), "{content}");
    // The follow-up re-sends the round-trip, and the server's template takes it.
    let next = turn(&h, "Thanks!", &mut decide(1, ToolDecision::Once));
    next.end
        .expect("ends")
        .unwrap_or_else(|e| panic!("{e}\n{}", server.output()));
    // (It is asked to call again: `required` holds for every turn.)
    let b = chats(&passed);
    assert!(b.len() >= 3, "{b:?}");
    let again = b[2]["messages"].as_array().expect("messages").clone();
    assert_eq!(again[..3], m[..3]);
    let roles: Vec<&str> = again
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "user"]);
    assert_eq!(again[4]["content"], "Thanks!");
}
