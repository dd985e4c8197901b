//! A request's messages as the conversation the engine renders ([`conversation`]): a system
//! prompt, the exchanges (a user message and everything the assistant did after it: its text,
//! its tool calls and their results, in place), and either a last user message to answer or a
//! last exchange whose tool results the model answers on from.

use serde_json::Value;

use crate::error::ApiError;
use crate::parts::content;
use crate::request::{ChatRequest, Message, join};

/// A tool call of an answer, as the client sent it back.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as compact JSON text (an object).
    pub arguments: String,
    /// Bytes of the answer's text before the call.
    pub at: usize,
    /// Its hand-over's number in the answer.
    pub handover: usize,
    /// The `tool` message's text.
    pub response: Option<String>,
}

/// An exchange of the history: the user's message and the answer to it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Exchange {
    pub user: Message,
    pub answer: String,
    pub calls: Vec<Call>,
}

impl Exchange {
    fn answered(&self) -> bool {
        !self.answer.is_empty() || !self.calls.is_empty()
    }
}

/// What the last message was.
#[derive(Clone, Copy, PartialEq)]
enum Last {
    None,
    User,
    Assistant,
    Tool,
}

/// The messages as a system prompt, exchanges and a last user message (or, after tool
/// results, a last exchange to answer on from); neighbours of one role are joined (a blank line
/// between their texts).
pub(crate) fn conversation(
    messages: &[Value],
    r: &mut ChatRequest,
    fetch: bool,
) -> Result<(), ApiError> {
    let mut system: Vec<String> = Vec::new();
    let mut done: Vec<Exchange> = Vec::new();
    let mut cur: Option<Exchange> = None;
    let mut last = Last::None;
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let o = m
            .as_object()
            .ok_or_else(|| ApiError::invalid(&at, "a message must be an object"))?;
        let role = o.get("role").and_then(Value::as_str).unwrap_or("");
        let from = (role == "user").then_some(fetch);
        let msg = content(o.get("content"), &format!("{at}.content"), from)?;
        match role {
            "system" | "developer" if last == Last::None => system.push(msg.text),
            "system" | "developer" => {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    "a system message must come before the conversation's first message",
                ));
            }
            "user" => {
                match cur.as_mut() {
                    Some(c) if !c.answered() => join(&mut c.user, msg),
                    _ => {
                        done.extend(closed(cur.take(), &at)?);
                        cur = Some(Exchange {
                            user: msg,
                            ..Exchange::default()
                        });
                    }
                }
                last = Last::User;
            }
            "assistant" => {
                let c = cur.get_or_insert_with(Exchange::default);
                // Text after tool results goes on from them; a neighbour is a new paragraph.
                match last {
                    Last::Tool => c.answer.push_str(&msg.text),
                    _ if c.answer.is_empty() || msg.text.is_empty() => c.answer.push_str(&msg.text),
                    _ => {
                        c.answer.push_str("\n\n");
                        c.answer.push_str(&msg.text);
                    }
                }
                calls(o.get("tool_calls"), &format!("{at}.tool_calls"), c)?;
                last = Last::Assistant;
            }
            "tool" => {
                result(o, &at, msg.text, cur.as_mut())?;
                last = Last::Tool;
            }
            other => {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    format!("`{other}` is not a role: system, developer, user, assistant or tool"),
                ));
            }
        }
    }
    r.system = Some(system.join("\n\n")).filter(|s| !s.trim().is_empty());
    match (last, cur) {
        (Last::User, Some(c)) => r.last = c.user,
        (Last::Tool, Some(c)) => {
            done.extend(closed(Some(c), "messages")?);
            r.continues = true;
        }
        _ => {
            return Err(ApiError::invalid(
                "messages",
                "the last message must be the user's (the one to answer) or a tool's result",
            ));
        }
    }
    r.history = done;
    Ok(())
}

/// An exchange that ends: every call it made needs its result.
fn closed(c: Option<Exchange>, at: &str) -> Result<Option<Exchange>, ApiError> {
    if let Some(call) = c
        .as_ref()
        .and_then(|c| c.calls.iter().find(|c| c.response.is_none()))
    {
        return Err(ApiError::invalid(
            at,
            format!(
                "tool call `{}` has no result: a `tool` message with its tool_call_id follows \
                 the assistant's calls",
                call.id
            ),
        ));
    }
    Ok(c)
}

/// An assistant message's `tool_calls`, one hand-over, placed after the answer's text so far.
fn calls(v: Option<&Value>, at: &str, c: &mut Exchange) -> Result<(), ApiError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(a)) if a.is_empty() => return Ok(()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid(at, "an array of calls")),
    };
    let handover = c.calls.last().map_or(0, |x| x.handover + 1);
    for (j, call) in list.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let id = call.get("id").and_then(Value::as_str).unwrap_or("");
        let name = call.pointer("/function/name").and_then(Value::as_str);
        let arguments = call.pointer("/function/arguments").and_then(Value::as_str);
        let (Some(name), Some(arguments)) = (name, arguments) else {
            return Err(ApiError::invalid(
                format!("{at}.function"),
                "a call has a function with a name and arguments (JSON text)",
            ));
        };
        // No arguments at all is an empty object, as some clients send it.
        let arguments = Some(arguments)
            .filter(|a| !a.trim().is_empty())
            .unwrap_or("{}");
        let args = serde_json::from_str::<Value>(arguments)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{at}.function.arguments"),
                    "the arguments are a JSON object, as text",
                )
            })?;
        if id.is_empty() || c.calls.iter().any(|x| x.id == id) {
            return Err(ApiError::invalid(
                format!("{at}.id"),
                "each call has an id of its own",
            ));
        }
        c.calls.push(Call {
            id: id.to_string(),
            name: name.to_string(),
            arguments: args.to_string(),
            at: c.answer.len(),
            handover,
            response: None,
        });
    }
    Ok(())
}

/// A `tool` message: the result of the call it names, among the exchange's.
fn result(
    o: &serde_json::Map<String, Value>,
    at: &str,
    text: String,
    c: Option<&mut Exchange>,
) -> Result<(), ApiError> {
    let id = o.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
    let call = c.and_then(|c| c.calls.iter_mut().find(|x| x.id == id));
    match call {
        Some(call) if call.response.is_none() => {
            call.response = Some(text);
            Ok(())
        }
        Some(_) => Err(ApiError::invalid(
            format!("{at}.tool_call_id"),
            format!("call `{id}` has a result already"),
        )),
        None => Err(ApiError::invalid(
            format!("{at}.tool_call_id"),
            format!("no call of the assistant's has the id `{id}`"),
        )),
    }
}
