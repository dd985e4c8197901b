//! Reads tool calls leniently: Gemma's own syntax as the template writes it, and the variants
//! models and remote servers actually send (JSON strings and keys, JSON-string arguments,
//! double braces, trailing commas, whitespace, bare words, `None`). It never writes syntax
//! (`format.rs`) and never constrains sampling (`grammar.rs`).

use serde_json::{Map, Value};

use super::format::QUOTE;
use super::reader::Parser;

/// The token that opens a call.
pub const CALL_OPEN: &str = "<|tool_call>";
/// The token that closes a call.
pub const CALL_CLOSE: &str = "<tool_call|>";
/// The token the model stops on after its calls.
const RESPONSE_OPEN: &str = "<|tool_response>";

/// Nesting the parser follows before it gives up (the input is untrusted).
pub(super) const MAX_DEPTH: usize = 64;

/// One parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    /// The tool's name.
    pub name: String,
    /// The arguments, in the order written.
    pub arguments: Map<String, Value>,
}

/// Why a call could not be read. Offsets are bytes into the text given to [`parse_call`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing but whitespace and markers.
    #[error("the tool call is empty")]
    Empty,
    /// The text does not start with `call:`.
    #[error("a tool call starts with `call:`, this one with `{found}`")]
    NotACall {
        /// The start of the text.
        found: String,
    },
    /// `call:` names no tool.
    #[error("the tool call names no tool")]
    MissingName,
    /// Something else stood where the syntax needs `expected`.
    #[error("expected {expected} at byte {offset} of the tool call, found `{found}`")]
    Expected {
        /// What the syntax needs there.
        expected: &'static str,
        /// What stood there (a few characters, or `end of text`).
        found: String,
        /// Where.
        offset: usize,
    },
    /// A string never closes.
    #[error("the string opened at byte {offset} of the tool call never closes")]
    UnterminatedString {
        /// Where it opened.
        offset: usize,
    },
    /// The arguments nest too deep.
    #[error("the tool call's arguments nest deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// Parses the text of one call, with or without `<|tool_call>` before it and `<tool_call|>`
/// after it. Accepted besides the template's own form: strings in `"…"` (JSON escapes) or
/// `'…'`, quoted keys, `call:f{{"a":1}}` and `call:f{<|"|>{"a":1}<|"|>}` (arguments as a JSON
/// object or string), trailing commas, whitespace between tokens, bare words as strings
/// (`{unit:celsius}`), `None`/`null`/`True`/`False`, closing brackets missing at the very
/// end, a call without braces (`call:now`), and a JSON object
/// `{"name":…,"arguments":…}`.
pub fn parse_call(text: &str) -> Result<ParsedCall, ParseError> {
    let (start, body) = strip_markers(text);
    if body.is_empty() {
        return Err(ParseError::Empty);
    }
    if body.starts_with('{')
        && let Some(call) = json_call(body)
    {
        return Ok(call);
    }
    let mut p = Parser {
        s: body,
        pos: 0,
        base: start,
    };
    p.call()
}

/// Finds every `<|tool_call>…<tool_call|>` in `text` and parses each. A call runs to its
/// `<tool_call|>` outside a `<|"|>` string; one that never closes runs to the next
/// `<|tool_call>` or `<|tool_response>`, or to the end.
pub fn parse_calls(text: &str) -> Vec<Result<ParsedCall, ParseError>> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(i) = text[rest..].find(CALL_OPEN) {
        let start = rest + i + CALL_OPEN.len();
        let (end, next) = call_end(text, start);
        out.push(parse_call(&text[start..end]));
        rest = next;
    }
    out
}

/// Where the call starting at `start` ends, and where the search for the next one resumes.
fn call_end(text: &str, start: usize) -> (usize, usize) {
    let b = text.as_bytes();
    let mut in_string = false;
    let mut i = start;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with(QUOTE) {
            in_string = !in_string;
            i += QUOTE.len();
            continue;
        }
        if !in_string && rest.starts_with(CALL_CLOSE) {
            return (i, i + CALL_CLOSE.len());
        }
        i += 1;
    }
    // Unbalanced quotes: the first close anywhere, else the next marker, else the end.
    let tail = &text[start..];
    if let Some(j) = tail.find(CALL_CLOSE) {
        return (start + j, start + j + CALL_CLOSE.len());
    }
    let stop = [CALL_OPEN, RESPONSE_OPEN]
        .iter()
        .filter_map(|m| tail.find(m))
        .min()
        .map_or(text.len(), |j| start + j);
    (stop, stop)
}

/// The call's text without markers and outer whitespace, and where it starts in `text`.
fn strip_markers(text: &str) -> (usize, &str) {
    let mut s = text.trim_start();
    let mut start = text.len() - s.len();
    if let Some(r) = s.strip_prefix(CALL_OPEN) {
        let r2 = r.trim_start();
        start += CALL_OPEN.len() + (r.len() - r2.len());
        s = r2;
    }
    let mut s = s.trim_end();
    for marker in [RESPONSE_OPEN, CALL_CLOSE] {
        if let Some(r) = s.strip_suffix(marker) {
            s = r.trim_end();
        }
    }
    (start, s)
}

/// `{"name": …, "arguments": …}` (or `"parameters"`), arguments an object or a JSON string.
fn json_call(body: &str) -> Option<ParsedCall> {
    let Value::Object(mut m) = serde_json::from_str::<Value>(body).ok()? else {
        return None;
    };
    let Some(Value::String(name)) = m.remove("name") else {
        return None;
    };
    let args = m.remove("arguments").or_else(|| m.remove("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s).ok()? {
            Value::Object(a) => a,
            _ => return None,
        },
        Some(_) => return None,
    };
    Some(ParsedCall { name, arguments })
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
