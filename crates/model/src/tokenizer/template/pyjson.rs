//! transformers' `tojson` filter: `json.dumps` with Python's spacing, escapes and key order, over
//! minijinja values.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::{py_float, py_str};

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, with Python's spacing (`{"a": 1, "b": [1, 2]}`).
pub(super) fn tojson(v: &Value, kwargs: Kwargs) -> Result<String, Error> {
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
