//! A `tools/call` result read leniently into a [`ToolAnswer`]: its text parts joined, other
//! parts (pictures, sound, resources, links) as placeholders that say what they were, its
//! structured content kept when it is an object, `isError` as a failed call.

use serde_json::Value;

use super::{McpError, ToolAnswer, kind};
use crate::host::clean;

/// A `tools/call` result: text parts joined by blank lines, other parts as placeholders.
pub fn read_answer(answer: &Value) -> Result<ToolAnswer, McpError> {
    let Some(obj) = answer.as_object() else {
        return Err(McpError::Protocol(format!(
            "the tool answered {}, not a result",
            kind(answer)
        )));
    };
    let parts: Vec<String> = match obj.get("content") {
        Some(Value::Array(items)) => items.iter().map(content_text).collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(other) => {
            return Err(McpError::Protocol(format!(
                "the tool's content is {}",
                kind(other)
            )));
        }
    };
    let structured = match obj.get("structuredContent") {
        Some(Value::Object(map)) => Some(map.clone()),
        _ => None,
    };
    let mut text = parts.join("\n\n");
    if text.is_empty()
        && let Some(map) = &structured
    {
        text = Value::Object(map.clone()).to_string();
    }
    let ok = !obj.get("isError").and_then(Value::as_bool).unwrap_or(false);
    Ok(ToolAnswer {
        ok,
        text,
        structured,
    })
}

/// One content part as text: its text, or a placeholder naming what it is.
fn content_text(item: &Value) -> String {
    let field = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => field("text").to_owned(),
        kind @ ("image" | "audio") => {
            let bytes = field("data").len() / 4 * 3;
            format!(
                "[{kind}: {}, about {bytes} bytes, not shown]",
                or_unknown(field("mimeType"))
            )
        }
        "resource" => {
            let resource = item.get("resource");
            let get = |key: &str| resource.and_then(|r| r.get(key)).and_then(Value::as_str);
            match get("text") {
                Some(text) => text.to_owned(),
                None => format!(
                    "[resource {}, not text]",
                    clean::message(get("uri").unwrap_or("?"), 200)
                ),
            }
        }
        "resource_link" => format!("[link: {}]", clean::message(field("uri"), 200)),
        other => format!(
            "[{} content, not shown]",
            clean::message(or_unknown(other), 40)
        ),
    }
}

/// `s`, or `unknown` when empty.
fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown" } else { s }
}
