//! Reads tool calls leniently: Gemma's own syntax as the template writes it, and the variants
//! models and remote servers actually send (JSON strings and keys, JSON-string arguments,
//! double braces, trailing commas, whitespace, bare words, `None`). It never writes syntax
//! (`format.rs`) and never constrains sampling (`grammar.rs`).

use serde_json::{Map, Number, Value};

use super::format::QUOTE;

/// The token that opens a call.
pub const CALL_OPEN: &str = "<|tool_call>";
/// The token that closes a call.
pub const CALL_CLOSE: &str = "<tool_call|>";
/// The token the model stops on after its calls.
const RESPONSE_OPEN: &str = "<|tool_response>";

/// Nesting the parser follows before it gives up (the input is untrusted).
const MAX_DEPTH: usize = 64;

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

struct Parser<'a> {
    s: &'a str,
    pos: usize,
    /// Offset of `s` in the caller's text.
    base: usize,
}

impl Parser<'_> {
    fn call(&mut self) -> Result<ParsedCall, ParseError> {
        let Some(after) = self.s.strip_prefix("call") else {
            return Err(ParseError::NotACall {
                found: self.s.chars().take(12).collect(),
            });
        };
        self.pos = self.s.len() - after.len();
        self.ws();
        if !self.eat(b':') {
            return Err(self.expected("`:` after `call`"));
        }
        self.ws();
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c == b'{' || c.is_ascii_whitespace() {
                break;
            }
            self.pos += 1;
        }
        let name = self.s[start..self.pos].trim_matches(['"', '\'']);
        if name.is_empty() {
            return Err(ParseError::MissingName);
        }
        let name = name.to_string();
        self.ws();
        let arguments = if self.peek().is_none() {
            Map::new()
        } else {
            self.arguments()?
        };
        self.ws();
        if self.peek().is_some() {
            return Err(self.expected("the end of the call"));
        }
        Ok(ParsedCall { name, arguments })
    }

    /// The braces after the name: an object, `{{…}}`, or `{"<JSON object>"}`.
    fn arguments(&mut self) -> Result<Map<String, Value>, ParseError> {
        if self.peek() != Some(b'{') {
            return Err(self.expected("`{` after the tool's name"));
        }
        let open = self.pos;
        self.pos += 1;
        self.ws();
        if self.peek() == Some(b'{') {
            let inner = self.object(1)?;
            self.ws();
            self.eat(b',');
            self.ws();
            // The outer `}` may be missing at the very end.
            if !self.eat(b'}') && self.peek().is_some() {
                return Err(self.expected("`}` after the arguments"));
            }
            return Ok(inner);
        }
        if self.at_string() {
            let save = self.pos;
            if let Value::String(s) = self.value(1)? {
                self.ws();
                if matches!(self.peek(), Some(b'}') | None)
                    && let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&s)
                {
                    self.eat(b'}');
                    return Ok(m);
                }
            }
            self.pos = save;
        }
        self.pos = open;
        self.object(0)
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        self.ws();
        match self.peek() {
            None => Err(self.expected("a value")),
            Some(b'{') => Ok(Value::Object(self.object(depth + 1)?)),
            Some(b'[') => self.array(depth + 1),
            _ if self.at_string() => Ok(Value::String(self.string()?)),
            Some(_) => self.bare(),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Map<String, Value>, ParseError> {
        if depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        self.pos += 1; // `{`
        let mut map = Map::new();
        loop {
            self.ws();
            match self.peek() {
                None => return Ok(map),
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(map);
                }
                Some(_) => {}
            }
            let key = self.key()?;
            self.ws();
            if !self.eat(b':') {
                return Err(self.expected("`:` after a key"));
            }
            let v = self.value(depth)?;
            map.insert(key, v);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') | None => {}
                Some(_) => return Err(self.expected("`,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.pos += 1; // `[`
        let mut items = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                None => return Ok(Value::Array(items)),
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                Some(_) => {}
            }
            items.push(self.value(depth)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') | None => {}
                Some(_) => return Err(self.expected("`,` or `]`")),
            }
        }
    }

    fn key(&mut self) -> Result<String, ParseError> {
        if self.at_string() {
            return self.string();
        }
        let start = self.pos;
        while let Some(c) = self.peek() {
            if matches!(c, b':' | b',' | b'}' | b'{' | b'[' | b']') {
                break;
            }
            self.pos += 1;
        }
        let key = self.s[start..self.pos].trim();
        if key.is_empty() {
            self.pos = start;
            return Err(self.expected("a key"));
        }
        Ok(key.to_string())
    }

    fn at_string(&self) -> bool {
        let rest = &self.s[self.pos..];
        rest.starts_with(QUOTE) || rest.starts_with('"') || rest.starts_with('\'')
    }

    /// A string in `<|"|>…<|"|>` (raw), `"…"` (JSON escapes; raw if they are invalid) or
    /// `'…'` (raw).
    fn string(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        let rest = &self.s[start..];
        let unterminated = ParseError::UnterminatedString {
            offset: self.base + start,
        };
        if let Some(r) = rest.strip_prefix(QUOTE) {
            let end = r.find(QUOTE).ok_or(unterminated)?;
            self.pos = start + QUOTE.len() + end + QUOTE.len();
            return Ok(r[..end].to_string());
        }
        let q = rest.as_bytes()[0];
        let b = rest.as_bytes();
        let mut i = 1;
        while i < b.len() && b[i] != q {
            i += if b[i] == b'\\' { 2 } else { 1 };
        }
        if i >= b.len() {
            return Err(unterminated);
        }
        self.pos = start + i + 1;
        let inner = &rest[1..i];
        if q == b'"'
            && let Ok(s) = serde_json::from_str::<String>(&rest[..=i])
        {
            return Ok(s);
        }
        Ok(inner.to_string())
    }

    /// A bare word up to the next `,`, `}` or `]`: a keyword, a number, or else a string.
    fn bare(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if matches!(c, b',' | b'}' | b']') || self.s[self.pos..].starts_with(QUOTE) {
                break;
            }
            self.pos += 1;
        }
        let word = self.s[start..self.pos].trim();
        if word.is_empty() {
            self.pos = start;
            return Err(self.expected("a value"));
        }
        Ok(bare_value(word))
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expected(&self, expected: &'static str) -> ParseError {
        let rest = &self.s[self.pos..];
        let found = if rest.is_empty() {
            "end of text".to_string()
        } else {
            rest.chars().take(12).collect()
        };
        ParseError::Expected {
            expected,
            found,
            offset: self.base + self.pos,
        }
    }
}

/// What a bare word stands for.
fn bare_value(word: &str) -> Value {
    match word {
        "true" | "True" => return Value::Bool(true),
        "false" | "False" => return Value::Bool(false),
        "null" | "None" | "none" | "NULL" => return Value::Null,
        _ => {}
    }
    number(word).map_or_else(|| Value::String(word.to_string()), Value::Number)
}

/// A JSON or Python number (`5`, `-2`, `1.5`, `1e-05`, `.5`); `inf` and `nan` are words.
fn number(word: &str) -> Option<Number> {
    let numeric = word
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'));
    if !numeric || !word.bytes().any(|c| c.is_ascii_digit()) {
        return None;
    }
    if let Ok(i) = word.parse::<i64>() {
        return Some(i.into());
    }
    if let Ok(u) = word.parse::<u64>() {
        return Some(u.into());
    }
    word.parse::<f64>().ok().and_then(Number::from_f64)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
