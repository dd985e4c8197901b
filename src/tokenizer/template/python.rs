//! The Jinja environment chat templates are written for: Hugging Face renders them with jinja2
//! (`ImmutableSandboxedEnvironment`, `trim_blocks`, `lstrip_blocks`, `loopcontrols`, its own
//! `tojson`, `raise_exception`, `strftime_now`) and Python's string and dict methods. This module
//! makes minijinja render the same bytes: Python's methods and whitespace, Python's `str()` of
//! values in output, `json.dumps` for `tojson`, jinja2's `sequence` test. It also bounds a
//! template's work (fuel) and output, since a checkpoint's template is untrusted input; there is
//! no loader, so a template reads no file.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// Instructions one render may run: the official templates need a few thousand per message; a
/// runaway loop stops here within about a second.
pub const FUEL: u64 = 50_000_000;
/// Bytes one render may write.
pub const MAX_OUTPUT: usize = 64 << 20;

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
    env.add_filter("tojson", tojson);
    env.add_test("sequence", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::Seq | ValueKind::String | ValueKind::Map | ValueKind::Iterable
        )
    });
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", strftime_now);
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
        let Some(end) = tag.find("%}") else {
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
    minijinja_contrib::pycompat::unknown_method_callback(state, value, name, args)
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

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, with Python's spacing (`{"a": 1, "b": [1, 2]}`).
fn tojson(v: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let indent = kwargs
        .get::<Option<Value>>("indent")?
        .filter(|i| !i.is_none());
    let sort = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    kwargs.assert_all_used()?;
    let indent = indent.map(|i| match i.as_i64() {
        Some(n) => " ".repeat(n.max(0) as usize),
        None => i.as_str().unwrap_or_default().to_string(),
    });
    let (item, key) = match separators.as_deref() {
        Some([i, k]) => (i.clone(), k.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson separators must be a pair",
            ));
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = JsonStyle {
        ascii,
        indent,
        item,
        key,
        sort,
    };
    let mut out = String::new();
    style.write(v, 0, &mut out)?;
    Ok(out)
}

struct JsonStyle {
    ascii: bool,
    indent: Option<String>,
    item: String,
    key: String,
    sort: bool,
}

impl JsonStyle {
    fn write(&self, v: &Value, level: usize, out: &mut String) -> Result<(), Error> {
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
            ValueKind::Number => {
                let x = f64::try_from(v.clone())?;
                out.push_str(&match x {
                    x if x.is_nan() => "NaN".into(),
                    x if x.is_infinite() && x > 0.0 => "Infinity".into(),
                    x if x.is_infinite() => "-Infinity".into(),
                    x => py_float(x),
                });
            }
            ValueKind::String => self.string(v.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container(('[', ']'), items.len(), level, out, |i, out| {
                    self.write(&items[i], level + 1, out)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort {
                    keys.sort();
                }
                self.container(('{', '}'), keys.len(), level, out, |i, out| {
                    let k = &keys[i];
                    match k.as_str() {
                        Some(s) => self.string(s, out),
                        None => self.string(&json_key(k), out),
                    }
                    out.push_str(&self.key);
                    self.write(&v.get_item(k)?, level + 1, out)
                })?;
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("Object of type {} is not JSON serializable", v.kind()),
                ));
            }
        }
        Ok(())
    }

    fn container(
        &self,
        (open, close): (char, char),
        n: usize,
        level: usize,
        out: &mut String,
        mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if n == 0 {
            out.push(close);
            return Ok(());
        }
        let newline = |out: &mut String, depth: usize| {
            if let Some(ind) = &self.indent {
                out.push('\n');
                for _ in 0..depth {
                    out.push_str(ind);
                }
            }
        };
        for i in 0..n {
            if i > 0 {
                out.push_str(&self.item);
            }
            newline(out, level + 1);
            item(i, out)?;
        }
        newline(out, level);
        out.push(close);
        Ok(())
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ascii && (c as u32) > 0x7e) => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A non-string dict key as `json.dumps` writes it.
fn json_key(k: &Value) -> String {
    match k.kind() {
        ValueKind::None => "null".into(),
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        _ => py_str(k),
    }
}

/// transformers' `strftime_now(format)`: the current time (UTC here) in `strftime`'s codes.
fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `strftime` of the UTC time `secs` after the epoch, for the common codes.
fn strftime(format: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = (days + 3).rem_euclid(7) as usize;
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
    let yday = before + day + i64::from(leap && month > 2);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year % 100),
            Some('m') => write!(out, "{month:02}"),
            Some('d') => write!(out, "{day:02}"),
            Some('-') if chars.clone().next() == Some('d') => {
                chars.next();
                write!(out, "{day}")
            }
            Some('B') => write!(out, "{}", MONTHS[month as usize - 1]),
            Some('b') => write!(out, "{}", &MONTHS[month as usize - 1][..3]),
            Some('A') => write!(out, "{}", DAYS[weekday]),
            Some('a') => write!(out, "{}", &DAYS[weekday][..3]),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{h:02}"),
            Some('I') => write!(out, "{:02}", (h + 11) % 12 + 1),
            Some('p') => write!(out, "{}", if h < 12 { "AM" } else { "PM" }),
            Some('M') => write!(out, "{m:02}"),
            Some('S') => write!(out, "{s:02}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: Value) -> String {
        let env = environment();
        env.render_str(source, ctx).expect("renders")
    }

    #[test]
    fn values_print_as_python_prints_them() {
        let ctx = Value::from_serialize(serde_json::json!({
            "n": null, "t": true, "f": 2.5, "big": 1e20, "small": 1.5e-7, "whole": 3.0,
            "i": 7, "l": ["a", 1, null, "it's"], "d": {"k": false}
        }));
        let got = render(
            "{{ n }}|{{ t }}|{{ f }}|{{ big }}|{{ small }}|{{ whole }}|{{ i }}|{{ l }}|{{ d }}|{{ missing }}",
            ctx,
        );
        assert_eq!(
            got,
            "None|True|2.5|1e+20|1.5e-07|3.0|7|['a', 1, None, \"it's\"]|{'k': False}|"
        );
    }

    #[test]
    fn tojson_is_json_dumps() {
        let ctx = Value::from_serialize(serde_json::json!({
            "x": {"b": [1, 2.0, "é<>\n"], "a": null, "c": {}}
        }));
        assert_eq!(
            render("{{ x | tojson }}", ctx.clone()),
            r#"{"b": [1, 2.0, "é<>\n"], "a": null, "c": {}}"#
        );
        assert_eq!(
            render("{{ x | tojson(indent=2, sort_keys=true) }}", ctx.clone()),
            "{\n  \"a\": null,\n  \"b\": [\n    1,\n    2.0,\n    \"é<>\\n\"\n  ],\n  \"c\": {}\n}"
        );
        assert_eq!(
            render("{{ x.b | tojson(ensure_ascii=true) }}", ctx),
            r#"[1, 2.0, "\u00e9<>\n"]"#
        );
    }

    #[test]
    fn python_methods_and_whitespace() {
        let ctx = Value::from_serialize(serde_json::json!({
            "m": {"role": "user", "content": "\u{1c} a<sep>b \t"}
        }));
        let src = "{{ m.get('role') }}|{{ m.get('x', 'd') }}|{{ m.content.strip() }}|\
                   {{ m.content | trim }}|{{ m.content.split('<sep>') | length }}|\
                   {{ 'a  b '.split() }}|{{ m.content.strip(' \t').startswith('\u{1c}') }}|\
                   {% for k, v in m.items() %}{{ k }}={{ v | length }};{% endfor %}|\
                   {{ 'x' is sequence }}{{ {} is sequence }}";
        assert_eq!(
            render(src, ctx),
            "user|d|a<sep>b|a<sep>b|2|['a', 'b']|True|role=4;content=11;|TrueTrue"
        );
    }

    #[test]
    fn loop_controls_and_raise_exception() {
        let env = environment();
        let out = env
            .render_str(
                "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
                (),
            )
            .expect("renders");
        assert_eq!(out, "02");
        let e = env
            .render_str("{{ raise_exception('roles must alternate') }}", ())
            .expect_err("raises");
        assert!(e.to_string().contains("roles must alternate"), "{e}");
    }

    #[test]
    fn generation_tags_render_their_body() {
        let src = "a {%- generation -%} b {%- endgeneration %} c{% if x %}{% endif %}";
        assert_eq!(
            without_generation_tags(src),
            "a {%- if true -%} b {%- endif %} c{% if x %}{% endif %}"
        );
        assert_eq!(
            render(&without_generation_tags(src), Value::UNDEFINED),
            "ab c"
        );
    }

    #[test]
    fn runaway_templates_run_out_of_fuel() {
        let env = environment();
        let e = env
            .render_str(
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                (),
            )
            .expect_err("stops");
        assert_eq!(e.kind(), ErrorKind::OutOfFuel);
    }

    #[test]
    fn strftime_matches_known_dates() {
        // 2026-12-01 10:33:07 UTC was a Tuesday.
        let t = 1_796_121_187;
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %I%p %-d %%", t),
            "2026-12-01 10:33:07 Tue Tuesday Dec December 335 26 10AM 1 %"
        );
        assert_eq!(strftime("%d %b %Y", 951_782_400), "29 Feb 2000");
    }
}
