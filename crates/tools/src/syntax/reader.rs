//! The lenient reader behind [`super::parse`]: one call's text, character by character, into
//! a name and arguments: Gemma's own syntax and the variants models and servers send (JSON or
//! Python strings and words, missing closers at the end, trailing commas, bare words).

use serde_json::{Map, Number, Value};

use super::format::QUOTE;
use super::parse::{MAX_DEPTH, ParseError, ParsedCall};

/// A reader over one call's text.
pub(super) struct Parser<'a> {
    pub s: &'a str,
    pub pos: usize,
    /// Offset of `s` in the caller's text.
    pub base: usize,
}

impl Parser<'_> {
    pub fn call(&mut self) -> Result<ParsedCall, ParseError> {
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
