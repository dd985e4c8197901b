//! The Jinja environment chat templates are written for: Hugging Face renders them with jinja2
//! (`ImmutableSandboxedEnvironment`, `trim_blocks`, `lstrip_blocks`, `loopcontrols`, its own
//! `tojson`, `raise_exception`, `strftime_now`) and Python's string and dict methods. This module
//! makes minijinja render the same bytes: Python's methods and whitespace, Python's `str()` of
//! values in output and in `upper`/`lower`, `json.dumps` for `tojson`, jinja2's `dictsort`, its
//! `sequence` and `iterable` tests, and jinja2's words when a method is missing. It also bounds a
//! template's work (fuel) and output, since a checkpoint's template is untrusted input; there is
//! no loader, so a template reads no file.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

#[path = "pyjson.rs"]
mod pyjson;
#[path = "strftime.rs"]
mod strftime;

/// Instructions one render may run: the official templates need a few thousand per message; a
/// runaway loop stops here within about a second.
pub const FUEL: u64 = 50_000_000;
/// Bytes one render may write: what the tokenizer takes at once ([`crate::tokenizer::MAX_TEXT`]).
pub const MAX_OUTPUT: usize = crate::tokenizer::MAX_TEXT;

/// An environment configured as transformers configures jinja2.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(method);
    env.set_formatter(|out, _state, value| {
        out.write_str(&py_str(value))
            .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_filter("trim", trim);
    env.add_filter("string", |v: &Value| py_str(v));
    // `str(x).upper()`: a tool schema's `type` may be a list (`['STRING', 'NULL']`) or missing.
    env.add_filter("upper", |v: &Value| py_str(v).to_uppercase());
    env.add_filter("lower", |v: &Value| py_str(v).to_lowercase());
    env.add_filter("dictsort", dictsort);
    env.add_filter("tojson", pyjson::tojson);
    env.add_test("sequence", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::Seq | ValueKind::String | ValueKind::Map | ValueKind::Iterable
        )
    });
    // Python's `iter(x)` works on strings, lists, dicts and jinja2's undefined, not on None.
    env.add_test("iterable", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::Seq
                | ValueKind::String
                | ValueKind::Map
                | ValueKind::Iterable
                | ValueKind::Undefined
        )
    });
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", strftime::strftime_now);
    env
}

/// jinja2's `{% generation %}` blocks (transformers' assistant-mask extension) render their body
/// unchanged: they become `{% if true %}` with the same whitespace control.
pub fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        // The closing `%}` after the opening `{%` (in `{%}` they overlap).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => write!(out, "{{%{lead} if true {trail}%}}").unwrap_or(()),
            "endgeneration" => write!(out, "{{%{lead} endif {trail}%}}").unwrap_or(()),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Python's `str.isspace` for one character (Rust's also lacks U+001C..U+001F).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `strip`/`lstrip`/`rstrip`: whitespace, or any of `chars`.
fn py_strip(s: &str, chars: Option<&str>, left: bool, right: bool) -> String {
    let hit = |c: char| match chars {
        Some(set) => set.contains(c),
        None => py_space(c),
    };
    let mut t = s;
    if left {
        t = t.trim_start_matches(hit);
    }
    if right {
        t = t.trim_end_matches(hit);
    }
    t.to_string()
}

fn trim(v: &Value, chars: Option<String>) -> Result<String, Error> {
    let s = v.as_str().map_or_else(|| py_str(v), str::to_string);
    Ok(py_strip(&s, chars.as_deref(), true, true))
}

/// Python's methods on strings, dicts and lists (`message.get(...)`, `text.split(...)`).
fn method(state: &State, value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let (left, right) = match name {
            "strip" => (true, true),
            "lstrip" => (true, false),
            "rstrip" => (false, true),
            _ => (false, false),
        };
        if left || right {
            let chars = match args {
                [] => None,
                [c] if c.is_none() => None,
                [c] => Some(c.as_str().ok_or_else(|| {
                    Error::new(ErrorKind::InvalidOperation, "strip takes a string")
                })?),
                _ => return Err(Error::from(ErrorKind::TooManyArguments)),
            };
            return Ok(Value::from(py_strip(s, chars, left, right)));
        }
        if name == "split" && (args.is_empty() || args[0].is_none()) && args.len() <= 1 {
            return Ok(s.split(py_space).filter(|p| !p.is_empty()).collect());
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, name, args).map_err(|e| {
        match (e.kind(), py_type(value)) {
            // jinja2's words (`'str object' has no attribute 'get'`), as transformers reports it.
            (ErrorKind::UnknownMethod, Some(ty)) => {
                let ty = if value.is_none() {
                    "None".into()
                } else {
                    format!("{ty} object")
                };
                let what = format!("{} has no attribute {}", py_quote(&ty), py_quote(name));
                Error::new(ErrorKind::UnknownMethod, what)
            }
            _ => e,
        }
    })
}

/// Python's name of a value's type (`str`, `NoneType`), where it has one.
fn py_type(v: &Value) -> Option<&'static str> {
    Some(match v.kind() {
        ValueKind::None => "NoneType",
        ValueKind::String => "str",
        ValueKind::Map => "dict",
        ValueKind::Seq => "list",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float",
        _ => return None,
    })
}

/// jinja2's `dictsort`: a dict's `(key, value)` pairs sorted by key (or by value with
/// `by='value'`), strings compared by Python's `lower()` unless `case_sensitive`, ties kept in
/// the dict's order.
fn dictsort(v: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let case_sensitive = kwargs
        .get::<Option<bool>>("case_sensitive")?
        .unwrap_or(false);
    let by_value = match kwargs.get::<Option<&str>>("by")? {
        None | Some("key") => false,
        Some("value") => true,
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                r#"You can only sort by either "key" or "value""#,
            ));
        }
    };
    let reverse = kwargs.get::<Option<bool>>("reverse")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    if v.kind() != ValueKind::Map {
        let ty = py_type(v).map_or_else(|| v.kind().to_string(), str::to_string);
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("'{ty}' object has no attribute 'items'"),
        ));
    }
    let fold = |x: &Value| match x.as_str() {
        Some(s) if !case_sensitive => Value::from(s.to_lowercase()),
        _ => x.clone(),
    };
    let mut pairs: Vec<(Value, Value, Value)> = v
        .try_iter()?
        .map(|k| {
            let item = v.get_item(&k).unwrap_or_default();
            (fold(if by_value { &item } else { &k }), k, item)
        })
        .collect();
    // A stable sort, reversed by comparison, keeps ties in order as Python's `sorted` does.
    pairs.sort_by(|a, b| {
        let order = a.0.cmp(&b.0);
        if reverse { order.reverse() } else { order }
    });
    Ok(pairs
        .into_iter()
        .map(|(_, k, item)| Value::from(vec![k, item]))
        .collect())
}

/// Python's `str()` of a value, as jinja2 writes it out (`None`, `True`, `1.0`, `['a']`).
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => py_repr(v),
    }
}

/// Python's `repr()` of a value.
fn py_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number => py_number(v),
        ValueKind::String => py_quote(v.as_str().unwrap_or_default()),
        ValueKind::Map => {
            let items: Vec<String> = v
                .try_iter()
                .map(|keys| {
                    keys.map(|k| {
                        let item = v.get_item(&k).unwrap_or_default();
                        format!("{}: {}", py_repr(&k), py_repr(&item))
                    })
                    .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = v
                .try_iter()
                .map(|i| i.map(|x| py_repr(&x)).collect())
                .unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        _ => v.to_string(),
    }
}

fn py_number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    f64::try_from(v.clone()).map_or_else(|_| v.to_string(), py_float)
}

/// Python's `repr(float)`: the shortest round-trip digits, positional for exponents in
/// -4..16, else `1e+20` / `1.5e-07`.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{x}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// Python's `repr(str)`: single quotes unless the text has one and no double quote.
fn py_quote(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

#[cfg(test)]
#[path = "python_tests.rs"]
mod tests;
