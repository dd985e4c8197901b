//! What a server says is cleaned before it reaches the model's prompt or the screen: tool names
//! reduced to `[A-Za-z0-9_-]` ([`tool_name`]), descriptions and schema strings stripped of
//! control characters and of text that looks like a special token ([`prompt_text`],
//! [`schema`]), and result text cut to a byte budget on a character boundary with a note
//! ([`cut`]).

use serde_json::{Map, Value};

/// Longest tool name given to the model (bytes; names are ASCII).
pub const MAX_NAME: usize = 64;
/// Longest tool description given to the model (bytes).
pub const MAX_DESCRIPTION: usize = 2048;
/// Deepest nesting of a tool's parameter schema.
pub const MAX_SCHEMA_DEPTH: usize = 16;
/// Most bytes of a tool's parameter schema, as JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Words that are special tokens of Gemma's vocabularies when written `<word>` or `</word>`.
const TOKEN_WORDS: &[&str] = &[
    "bos",
    "eos",
    "pad",
    "unk",
    "mask",
    "start_of_turn",
    "end_of_turn",
    "start_of_image",
    "end_of_image",
    "image_soft_token",
    "start_of_audio",
    "end_of_audio",
    "audio_soft_token",
    "turn",
    "tool",
    "tool_call",
    "tool_response",
    "channel",
    "image",
    "audio",
    "think",
];

/// `raw` as a tool name: characters outside `[A-Za-z0-9_-]` become `_`, at most [`MAX_NAME`]
/// bytes, never empty.
pub fn tool_name(raw: &str) -> String {
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME)
        .collect();
    if name.is_empty() {
        name.push_str("tool");
    }
    name
}

/// `raw` fit for a prompt: control characters (line breaks and tabs included) become spaces,
/// runs of spaces one, `<|` and `|>` lose their bar, `<word>` / `</word>` for a special token's
/// word lose their brackets, and the text is cut to `max` bytes with `…`.
pub fn prompt_text(raw: &str, max: usize) -> String {
    let spaced: String = raw
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut text = spaced.replace("<|", "<").replace("|>", ">");
    text = unbracket_tokens(&text);
    let mut out = String::with_capacity(text.len());
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.len() > max {
        let end = floor_char_boundary(&out, max.saturating_sub('…'.len_utf8()));
        out.truncate(end);
        out.push('…');
    }
    out
}

/// `text` with `<word>` and `</word>` written `word` for each of [`TOKEN_WORDS`].
fn unbracket_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let body = after.strip_prefix('/').unwrap_or(after);
        let token = body.find('>').map(|end| &body[..end]).filter(|w| {
            TOKEN_WORDS
                .iter()
                .any(|t| t.eq_ignore_ascii_case(w.trim_matches('|')))
        });
        match token {
            Some(word) => {
                out.push_str(word.trim_matches('|'));
                rest = &body[word.len() + 1..];
            }
            None => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The largest index `<= at` that is a character boundary of `s`.
pub fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// A parameter schema fit for the prompt: every string in it cleaned ([`prompt_text`]), within
/// [`MAX_SCHEMA_DEPTH`] and [`MAX_SCHEMA_BYTES`]. An error says why the schema is refused: a key
/// holding control characters or token look-alikes is refused rather than renamed, since the
/// server expects its arguments under that key.
pub fn schema(raw: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    if raw.contains_key(crate::mcp::TOO_DEEP_KEY) {
        // What the stdio guard put in place of a schema too deep to read (`mcp/prune.rs`).
        return Err("its inputSchema is nested deeper than 128 levels".into());
    }
    let bytes = serde_json::to_vec(raw)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if bytes > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its inputSchema is {bytes} bytes (at most {MAX_SCHEMA_BYTES})"
        ));
    }
    clean_object(raw, 0)
}

/// One object of a schema, `depth` levels down.
fn clean_object(raw: &Map<String, Value>, depth: usize) -> Result<Map<String, Value>, String> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "its inputSchema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    let mut out = Map::new();
    for (key, value) in raw {
        if key.chars().any(char::is_control) || key.contains("<|") || key.contains("|>") {
            return Err(format!(
                "its inputSchema has a key {:?} that cannot be written",
                key
            ));
        }
        out.insert(key.clone(), clean_value(value, depth + 1)?);
    }
    Ok(out)
}

/// One value of a schema.
fn clean_value(value: &Value, depth: usize) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) => Value::String(prompt_text(s, MAX_DESCRIPTION)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| clean_value(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(clean_object(map, depth)?),
        other => other.clone(),
    })
}

/// `text` cut to at most `max` bytes on a character boundary, with a note
/// `[cut: N of M bytes]` after it when it was cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let end = floor_char_boundary(text, max);
    format!("{}\n[cut: {end} of {} bytes]", &text[..end], text.len())
}

/// `text` for a one-line message: control characters and Rust type names dropped, at most
/// `max` bytes.
pub fn message(text: &str, max: usize) -> String {
    let line: String = without_type_names(text)
        .chars()
        .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
        .filter(|c| !c.is_control())
        .collect();
    let line = line.trim();
    let end = floor_char_boundary(line, max);
    if end < line.len() {
        format!("{}…", &line[..end])
    } else {
        line.to_owned()
    }
}

/// `text` without the Rust type names a library writes into its errors
/// (`Transport [rmcp::transport::async_rw::AsyncRwTransport<…>] error: …`): a bracketed path
/// with `::` in it says nothing to a user. Other brackets stay.
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('[') {
        let after = &rest[at + 1..];
        let head = after
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or("");
        let mut depth = 1usize;
        let close = after.char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i)
        });
        match close {
            Some(i) if head.contains("::") => {
                out.push_str(rest[..at].trim_end_matches(' '));
                rest = &after[i + 1..];
            }
            _ => {
                out.push_str(&rest[..=at]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod type_names {
    use super::message;

    #[test]
    fn a_librarys_type_names_leave_its_messages() {
        let raw = "the handshake failed (Send message error Transport [rmcp::transport::async_rw::\
                   AsyncRwTransport<rmcp::service::client::RoleClient, tokio::process::ChildStdout, \
                   tokio::process::ChildStdin>] error: Broken pipe (os error 32))";
        assert_eq!(
            message(raw, 400),
            "the handshake failed (Send message error Transport error: Broken pipe (os error 32))"
        );
        // Brackets without a path stay, and an unclosed one is left as it is.
        assert_eq!(message("got [1, 2] and [x::y", 400), "got [1, 2] and [x::y");
    }
}
