//! The API's JSON as gemma-chat serve writes it: a streamed answer's chunks (server-sent
//! events), a whole answer, the usage block, the model list; and the keys by which a slot
//! recognizes a conversation's messages.

use serde_json::{Value, json};

use crate::convo::Exchange;
use crate::request::{ChatRequest, Message};
use crate::turn::{ApiCall, Done};

/// What identifies one answer in its chunks.
#[derive(Debug, Clone)]
pub(crate) struct Ids {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// The fields every chunk of an answer starts with.
fn head(ids: &Ids) -> Value {
    json!({
        "id": ids.id,
        "object": "chat.completion.chunk",
        "created": ids.created,
        "model": ids.model,
        "system_fingerprint": "gemma-chat",
    })
}

/// One streamed chunk with `delta` (and a finish reason on the last).
pub(crate) fn chunk(ids: &Ids, delta: Value, finish: Option<&str>) -> Value {
    let mut c = head(ids);
    c["choices"] = json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
    c
}

/// The chunk with the usage only (`stream_options.include_usage`).
pub(crate) fn usage_chunk(ids: &Ids, done: &Done) -> Value {
    let mut c = head(ids);
    c["choices"] = json!([]);
    c["usage"] = usage(done);
    c
}

/// The usage block, with the reuse as `cached_tokens`.
pub(crate) fn usage(d: &Done) -> Value {
    json!({
        "prompt_tokens": d.prompt,
        "completion_tokens": d.completion,
        "total_tokens": d.prompt + d.completion,
        "prompt_tokens_details": {"cached_tokens": d.cached},
        "completion_tokens_details": {"reasoning_tokens": d.reasoning},
    })
}

/// A call as the API writes it (`index`: its place in the answer's calls, for a streamed
/// delta).
pub(crate) fn tool_call(c: &ApiCall, index: Option<usize>) -> Value {
    let mut v = json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}});
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

/// A whole answer (its content `null` when it only called tools).
pub(crate) fn completion(
    ids: &Ids,
    (text, thought): (&str, &str),
    calls: &[ApiCall],
    done: &Done,
) -> Value {
    let mut message = json!({"role": "assistant", "content": text});
    if !thought.is_empty() {
        message["reasoning_content"] = json!(thought);
    }
    if !calls.is_empty() {
        let calls: Vec<Value> = calls.iter().map(|c| tool_call(c, None)).collect();
        message["tool_calls"] = json!(calls);
        if text.is_empty() {
            message["content"] = Value::Null;
        }
    }
    json!({
        "id": ids.id,
        "object": "chat.completion",
        "created": ids.created,
        "model": ids.model,
        "system_fingerprint": "gemma-chat",
        "choices": [{"index": 0, "message": message, "logprobs": null,
                     "finish_reason": done.finish}],
        "usage": usage(done),
    })
}

/// `/v1/models`, with the context limit per conversation as vLLM reports it (`max_model_len`)
/// and whether the model thinks: gemma-chat's remote engine reads both, and knows by `owned_by`
/// that this server takes a thought budget.
pub(crate) fn models(model: &str, context: usize, thinking: bool) -> Value {
    json!({"object": "list", "data": [
        {"id": model, "object": "model", "created": 0, "owned_by": "gemma-chat",
         "max_model_len": context, "thinking": thinking}
    ]})
}

/// A server-sent event carrying `v`.
pub(crate) fn event(v: &Value) -> String {
    format!("data: {v}\n\n")
}

/// The keys of a request's messages, in order: the system prompt, each exchange's user message
/// and answer, the last message (none when the request goes on with the last answer: its key
/// is the answer's once the turn ends). Media count by their content's hash.
pub(crate) fn keys(r: &ChatRequest) -> Vec<String> {
    let mut k = vec![format!("s:{}", r.system.as_deref().unwrap_or(""))];
    for e in &r.history {
        k.push(user_key(&e.user));
        k.push(answer_key(&e.answer, &call_keys(e)));
    }
    match r.continues {
        true => {
            k.pop();
        }
        false => k.push(user_key(&r.last)),
    }
    k
}

/// The keys of an exchange's calls (their results left out: a slot holds them open).
pub(crate) fn call_keys(e: &Exchange) -> Vec<String> {
    e.calls
        .iter()
        .map(|c| call_key(&c.name, &c.arguments))
        .collect()
}

/// A call's key.
pub(crate) fn call_key(name: &str, arguments: &str) -> String {
    format!("{name}\u{0}{arguments}")
}

fn user_key(m: &Message) -> String {
    let mut s = format!("u:{}", m.text);
    for media in &m.media {
        s.push('\u{0}');
        s.push_str(&media.digest);
    }
    s
}

/// An answer's key: its text and its calls.
pub(crate) fn answer_key(text: &str, calls: &[String]) -> String {
    let mut s = format!("a:{text}");
    for c in calls {
        s.push('\u{1}');
        s.push_str(c);
    }
    s
}
