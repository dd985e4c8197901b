//! `gemma-chat serve` with the client's own tools, on a tiny Gemma 4 checkpoint with the official
//! chat template, over HTTP: a required call comes back as `tool_calls` (whole and streamed, the
//! same call), constrained to the tool's schema, and the turn ends there; the client's result
//! sent with the history is answered warm (every token of the call resident, only the result
//! prefilled), and a call the server never made is written again from its arguments.

use std::net::SocketAddr;
use std::path::Path;

use burn::tensor::Device;
use gemma_engine::protocol::{Event, TabSettings};
use gemma_engine::{EngineOptions, spawn};
use gemma_model::checkpoint::load;
use gemma_model::model::ComputeDtype;
use gemma_serve::Running;
use gemma_tools::config::Limits;
use serde_json::{Value, json};

use crate::common::chat::{first_after_loading, fixture};
use crate::serve::{options, post, streamed};

const OFFICIAL: &str = "tests/fixtures/templates/official/gemma4-31b-it.jinja";

/// A server on the tiny Gemma 4 checkpoint in `dir`, one slot, greedy, 24 tokens an answer.
fn server(dir: &Path) -> Running {
    let path = dir.to_path_buf();
    let engine = EngineOptions {
        // The tiny checkpoint rarely closes a string by itself: its calls are finished by force.
        call_limits: Limits {
            max_call_tokens: 24,
            ..Limits::default()
        },
        ..EngineOptions::default()
    };
    let h = spawn(engine, move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    });
    let (context_length, tool_calls) = match first_after_loading(&h) {
        Event::Ready {
            context_length,
            tool_calls,
            ..
        } => (context_length, tool_calls),
        other => panic!("unexpected {other:?}"),
    };
    assert!(tool_calls, "Gemma 4 writes tool calls");
    let mut o = options(context_length, (1, 4), None, 1 << 20);
    o.can_call_tools = true;
    o.base = TabSettings {
        max_new_tokens: 24,
        ..TabSettings::default()
    };
    gemma_serve::bind(o).expect("bound").spawn(h)
}

fn forecast() -> Value {
    json!([{"type": "function", "function": {"name": "forecast",
        "description": "The weather forecast for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}])
}

fn question() -> Value {
    json!({"role": "user", "content": "What is the weather in Paris?"})
}

fn ok(addr: SocketAddr, body: &Value) -> Value {
    let (status, v) = post(addr, body);
    assert_eq!(status, 200, "{v}");
    v
}

/// A streamed answer's calls, put together from their deltas, and its finish reason.
fn streamed_calls(addr: SocketAddr, body: &Value) -> (Vec<Value>, String) {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = String::new();
    for chunk in streamed(addr, &body) {
        let choice = &chunk["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for d in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().expect("index") as usize;
            if calls.len() <= i {
                calls.resize(i + 1, json!({}));
            }
            calls[i] = d.clone();
        }
    }
    (calls, finish)
}

#[test]
fn a_call_goes_back_to_the_client_and_its_result_is_answered_warm() {
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let running = server(dir.path());
    let addr = running.addr();
    let asked = json!({"messages": [question()], "tools": forecast(),
                       "tool_choice": "required"});
    let v = ok(addr, &asked);
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "forecast");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("text"))
        .expect("the arguments are JSON");
    assert!(
        args["city"].is_string(),
        "constrained to the schema: {args}"
    );
    let first_prompt = v["usage"]["prompt_tokens"].as_u64().expect("prompt");
    let first_done = first_prompt + v["usage"]["completion_tokens"].as_u64().expect("done");
    // Streamed (the same conversation, rewound to its prompt): the same call, as deltas.
    let (calls, finish) = streamed_calls(addr, &asked);
    assert_eq!(finish, "tool_calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["function"], call["function"]);
    assert!(calls[0]["id"].as_str().is_some_and(|id| !id.is_empty()));

    // The client runs the tool and sends the result with the history.
    let mut assistant = choice["message"].clone();
    assistant["tool_calls"][0]["id"] = calls[0]["id"].clone();
    let id = calls[0]["id"].clone();
    let answered = json!({"messages": [question(), assistant,
        {"role": "tool", "tool_call_id": id, "content": "Sunny, 21 degrees"}],
        "tools": forecast(), "tool_choice": "none"});
    let warm = ok(addr, &answered);
    let cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(
        cached >= first_done,
        "the call's turn resident: {cached} of {first_done}: {warm}"
    );
    assert_ne!(warm["choices"][0]["finish_reason"], "tool_calls");
    // The next question, after the whole exchange (call, result, answer): all of it resident.
    let mut next = answered.clone();
    let said = warm["choices"][0]["message"]["content"].clone();
    let messages = next["messages"].as_array_mut().expect("messages");
    messages.push(json!({"role": "assistant", "content": said}));
    messages.push(json!({"role": "user", "content": "Thanks. And tomorrow?"}));
    let after = ok(addr, &next);
    let held = warm["usage"]["total_tokens"].as_u64().expect("tokens");
    let cached = after["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(cached >= held, "{cached} of {held}: {after}");

    // A call the server does not know (another server's id) is written again from its JSON
    // arguments, as the chat template writes a call, and answered; the session goes back to
    // before the call (or to the start, where the sliding window cannot go back that far).
    // (Text sampled token by token need not tokenize back to the same ids: this checkpoint's
    // call holds form feeds that do not, which is why the server keeps its calls as the model
    // wrote them.)
    let mut other = answered.clone();
    other["messages"][1]["tool_calls"][0]["id"] = json!("call_from_elsewhere");
    other["messages"][2]["tool_call_id"] = json!("call_from_elsewhere");
    let cold = ok(addr, &other);
    let cached = cold["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(cached < first_done, "{first_prompt}: {cold}");
    assert_ne!(cold["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn gemma_chat_s_remote_engine_runs_its_own_tools_through_the_server() {
    use crate::common::remote_tools::{decide, engine, host, turn};
    use gemma_engine::protocol::{ToolChoice, ToolDecision, ToolSelection, TurnEnd};
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let running = server(dir.path());
    let log = dir.path().join("calls.jsonl");
    let h = engine(
        running.addr().port(),
        "gemma-3-270m",
        host(&log, 1),
        ToolChoice::Required,
    );
    let settings = TabSettings {
        max_new_tokens: 24,
        tools: ToolSelection::Only(vec!["test.forecast".into()]),
        tool_choice: ToolChoice::Required,
        ..TabSettings::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    let seen = turn(
        &h,
        "What is the weather?",
        &mut decide(1, ToolDecision::Once),
    );
    let (end, stats) = seen.end.clone().expect("ends").expect("answered");
    // The server's model called the engine's tool; the engine ran it on its own host and the
    // server answered on from its result.
    assert_eq!(seen.calls.len(), 1, "{seen:?}");
    assert_eq!(seen.calls[0].0.name, "forecast");
    assert_eq!(crate::common::mcp::logged(&log).len(), 1);
    assert!(seen.results[0].ok, "{:?}", seen.results);
    assert_eq!(stats.tool_calls, 1);
    assert_ne!(end, TurnEnd::Cancelled);
}

#[test]
fn a_json_answer_follows_its_schema_through_the_call_grammar() {
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let running = server(dir.path());
    let addr = running.addr();
    let place = json!({"type": "object", "properties": {"city": {"type": "string"},
                       "days": {"type": "integer"}}, "required": ["city", "days"]});
    let v = ok(
        addr,
        &json!({"messages": [question()], "response_format": {"type": "json_schema",
                "json_schema": {"name": "place", "schema": place}}}),
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    let answer: Value = serde_json::from_str(text).expect("the content is JSON");
    assert!(
        answer["city"].is_string() && answer["days"].is_i64(),
        "{answer}"
    );
    // A root that is not an object is asked wrapped and given back as itself.
    let list = json!({"type": "array", "items": {"type": "integer"}});
    let v = ok(
        addr,
        &json!({"messages": [question()], "response_format": {"type": "json_schema",
                "json_schema": {"name": "days", "schema": list}}}),
    );
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    let answer: Value = serde_json::from_str(text).expect("the content is JSON");
    assert!(
        answer
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_i64)),
        "{answer}"
    );
    // Tools and a JSON answer at once are refused by name.
    let (status, e) = post(
        addr,
        &json!({"messages": [question()], "tools": forecast(),
                "response_format": {"type": "json_object"}}),
    );
    assert_eq!(
        (status, &e["error"]["param"]),
        (400, &json!("response_format"))
    );
}
