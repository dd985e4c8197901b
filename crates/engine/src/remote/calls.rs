//! Tool calls as an OpenAI-compatible server streams them: `delta.tool_calls` pieces read
//! ([`call_deltas`]) and assembled into whole calls ([`Calls`]), bounded against a hostile
//! server (calls per answer, bytes of each call's arguments and of its id and name); each call
//! read for the tool run ([`attempt`]: arguments as JSON, else in Gemma's lenient syntax, names
//! cleaned); and the messages that carry a round-trip back to the server: the assistant message
//! with its `tool_calls` and one `role: "tool"` message per call ([`round_messages`]).

use serde_json::{Map, Value, json};

pub use super::limits::{MAX_ARGUMENTS, MAX_CALLS, MAX_ID};
use crate::protocol::CallMade;
use crate::tools::run::{Attempt, raw_shown};
use gemma_tools::host::clean;
use gemma_tools::syntax;

/// A piece of a streamed tool call (OpenAI's `delta.tool_calls[i]`): the first of a call
/// usually brings its index, id and name, the later ones more of its arguments' JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallDelta {
    /// Which call of the answer (`index`).
    pub index: Option<u64>,
    /// The call's id.
    pub id: Option<String>,
    /// The function's name.
    pub name: Option<String>,
    /// More of the arguments (an object sent whole is taken as its JSON text).
    pub arguments: Option<String>,
}

impl CallDelta {
    /// The bytes it carries, for the answer's budget.
    pub fn len(&self) -> usize {
        [&self.id, &self.name, &self.arguments]
            .iter()
            .map(|s| s.as_ref().map_or(0, String::len))
            .sum()
    }

    /// Whether it carries nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.index.is_none()
    }
}

/// The call pieces of a delta's `tool_calls`: an array of them (one object is taken as one);
/// entries that are not objects, and fields of the wrong type, are passed over.
pub fn call_deltas(v: &Value) -> Vec<CallDelta> {
    let list = match v {
        Value::Array(a) => a.as_slice(),
        Value::Object(_) => std::slice::from_ref(v),
        _ => &[],
    };
    let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    list.iter()
        .filter(|c| c.is_object())
        .map(|c| CallDelta {
            index: c.get("index").and_then(Value::as_u64),
            id: string(c.get("id")),
            name: string(c.pointer("/function/name")),
            arguments: match c.pointer("/function/arguments") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(o @ Value::Object(_)) => Some(o.to_string()),
                _ => None,
            },
        })
        .filter(|d| !d.is_empty())
        .collect()
}

/// One call as the stream built it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireCall {
    /// Its index in the answer, when the server gave one.
    pub index: Option<u64>,
    /// Its id (at most [`MAX_ID`] bytes; made up when the server sent none).
    pub id: String,
    /// The name as sent (at most [`MAX_ID`] bytes).
    pub name: String,
    /// The arguments' text as sent (at most [`MAX_ARGUMENTS`] bytes).
    pub arguments: String,
    /// More arguments came than [`MAX_ARGUMENTS`]; the rest was dropped.
    pub oversized: bool,
}

/// The calls of one answer, as their pieces come.
#[derive(Debug, Default)]
pub struct Calls {
    list: Vec<WireCall>,
}

/// `more` added to `to`, which keeps at most `max` bytes (cut on a character boundary); false
/// when some of it was dropped.
fn append(to: &mut String, more: &str, max: usize) -> bool {
    if to.len() + more.len() <= max {
        to.push_str(more);
        return true;
    }
    let room = clean::floor_char_boundary(more, max.saturating_sub(to.len()));
    to.push_str(&more[..room]);
    false
}

impl Calls {
    /// One piece: a new call (by a new index, or a new id where the server sends no index), or
    /// more of one. An error when the answer would make more than [`MAX_CALLS`] calls.
    pub fn push(&mut self, d: CallDelta) -> Result<(), String> {
        let at = match d.index {
            Some(i) => self.list.iter().position(|c| c.index == Some(i)),
            None => match &d.id {
                Some(id) if !self.list.iter().any(|c| c.id == *id) => None,
                _ => self.list.len().checked_sub(1),
            },
        };
        let at = match at {
            Some(at) => at,
            None if self.list.len() >= MAX_CALLS => {
                return Err(format!("more than {MAX_CALLS} tool calls in one answer"));
            }
            None => {
                self.list.push(WireCall {
                    index: d.index,
                    ..WireCall::default()
                });
                self.list.len() - 1
            }
        };
        let c = &mut self.list[at];
        if let Some(id) = d.id.filter(|_| c.id.is_empty()) {
            append(&mut c.id, &id, MAX_ID);
        }
        if let Some(name) = d.name.filter(|_| c.name.is_empty()) {
            append(&mut c.name, &name, MAX_ID);
        }
        if let Some(args) = d.arguments
            && !c.oversized
        {
            c.oversized = !append(&mut c.arguments, &args, MAX_ARGUMENTS);
        }
        Ok(())
    }

    /// Whether no call came.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The calls, in order, each with an id of its own (`call_N` where the server gave none,
    /// one not fit to send back, or one an earlier call has).
    pub fn finish(self) -> Vec<WireCall> {
        let mut list = self.list;
        for i in 0..list.len() {
            let (before, rest) = list.split_at_mut(i);
            let c = &mut rest[0];
            let taken = |id: &str| before.iter().any(|b| b.id == id);
            let printable = c.id.chars().all(|ch| ch.is_ascii_graphic());
            if c.id.is_empty() || !printable || taken(&c.id) {
                let mut id = format!("call_{i}");
                while taken(&id) {
                    id.push('_');
                }
                c.id = id;
            }
        }
        list
    }
}

/// `call` read for the tool run: a declared tool's name (cleaned: a name with other characters
/// is no declared tool), and its arguments: a JSON object (or a JSON string holding one), else
/// read in Gemma's lenient call syntax; or what is wrong with it.
pub fn attempt(call: &WireCall) -> Attempt {
    let raw = call.name.trim();
    if raw.is_empty() {
        return Attempt {
            name: "?".into(),
            arguments: Err("the call names no tool".into()),
            raw: raw_shown(&call.arguments),
            written: String::new(),
        };
    }
    let name = clean::tool_name(raw);
    let arguments = if call.oversized {
        Err(format!(
            "the call's arguments are over {} KiB",
            MAX_ARGUMENTS >> 10
        ))
    } else {
        arguments(&name, &call.arguments)
    };
    Attempt {
        name,
        arguments,
        raw: raw_shown(call.arguments.trim()),
        written: String::new(),
    }
}

/// Arguments' text as an object.
fn arguments(name: &str, text: &str) -> Result<Map<String, Value>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => return Ok(m),
        Ok(Value::Null) => return Ok(Map::new()),
        // Arguments encoded twice.
        Ok(Value::String(inner)) if inner.trim_start().starts_with('{') => {
            if let Ok(Value::Object(m)) = serde_json::from_str(&inner) {
                return Ok(m);
            }
        }
        Ok(_) => return Err("the call's arguments are not an object".into()),
        Err(_) => {}
    }
    let body = if text.starts_with('{') {
        text.to_string()
    } else {
        format!("{{{text}}}")
    };
    syntax::parse_call(&format!("call:{name}{body}"))
        .map(|p| p.arguments)
        .map_err(|e| format!("the call's arguments could not be read: {e}"))
}

/// The messages of one round-trip: the assistant message (its text, then its calls, each with
/// the arguments as read; for a call refused, what it sent when that is a JSON object, else
/// `{}`) and one `tool` message per call with its response.
pub fn round_messages(
    text: &str,
    calls: &[(WireCall, Attempt)],
    responses: &[Option<String>],
) -> Vec<Value> {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(c, a)| {
            let args = match &a.arguments {
                Ok(m) => Value::Object(m.clone()).to_string(),
                Err(_) => match serde_json::from_str::<Value>(&a.raw) {
                    Ok(v @ Value::Object(_)) => v.to_string(),
                    _ => "{}".into(),
                },
            };
            json!({"id": c.id, "type": "function",
                   "function": {"name": a.name, "arguments": args}})
        })
        .collect();
    let mut m = vec![json!({"role": "assistant", "content": text, "tool_calls": tool_calls})];
    for (i, (c, a)) in calls.iter().enumerate() {
        let content = responses.get(i).cloned().flatten().unwrap_or_default();
        m.push(json!({"role": "tool", "tool_call_id": c.id, "name": a.name, "content": content}));
    }
    m
}

/// The messages that stand for an answer that called tools, rebuilt from its transcript (an
/// attached chat, another path): per hand-over an assistant message with the text before it and
/// its calls, and a `tool` message per call; then the text after the last. Empty for an answer
/// that made no call (it is one assistant message).
pub fn rebuilt_replies(answer: &str, calls: &[CallMade]) -> Vec<Value> {
    let (parts, tail) = crate::protocol::hand_overs(answer, calls);
    let mut m = Vec::new();
    for (text, batch) in parts {
        let id = |i: usize| format!("call_{}_{i}", batch[0].handover);
        let tool_calls: Vec<Value> = batch
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": id(i), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        m.push(json!({"role": "assistant", "content": text, "tool_calls": tool_calls}));
        for (i, c) in batch.iter().enumerate() {
            let content = c.response.as_ref().map_or_else(String::new, |r| {
                r.structured.clone().unwrap_or_else(|| r.text.clone())
            });
            m.push(
                json!({"role": "tool", "tool_call_id": id(i), "name": c.name, "content": content}),
            );
        }
    }
    if !m.is_empty() {
        m.push(json!({"role": "assistant", "content": tail}));
    }
    m
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;
