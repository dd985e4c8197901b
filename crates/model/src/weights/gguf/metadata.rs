//! GGUF metadata: its values ([`Value`], long string arrays packed in a [`StrArray`]) and the
//! little-endian reader of the header, the key/value pairs and the tensor infos.

use std::path::Path;

use crate::error::{Error, Result};

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any unsigned integer type.
    U(u64),
    /// Any signed integer type.
    I(i64),
    /// f32 or f64.
    F(f64),
    /// bool.
    Bool(bool),
    /// UTF-8 string.
    Str(String),
    /// Array of values.
    Array(Vec<Value>),
    /// A long array of strings (a vocabulary), packed into one buffer.
    Strings(StrArray),
    /// A long array of numbers (scores, token types), as f64.
    Numbers(Vec<f64>),
}

/// Arrays longer than this are packed ([`Value::Strings`], [`Value::Numbers`]): a 262k-token
/// vocabulary as one `Value` per entry took 40 MB.
const PACK_OVER: usize = 4096;

/// How deep metadata arrays may nest (GGUF files use one level).
const MAX_DEPTH: usize = 4;

/// Strings stored end to end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StrArray {
    text: String,
    ends: Vec<usize>,
}

impl StrArray {
    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The strings in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.text[a..b])
    }
}

impl Value {
    /// As an unsigned integer, when it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U(v) => Some(v),
            Value::I(v) if v >= 0 => Some(v as u64),
            Value::Bool(b) => Some(b as u64),
            _ => None,
        }
    }

    /// As a float, when it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F(v) => Some(v),
            Value::U(v) => Some(v as f64),
            Value::I(v) => Some(v as f64),
            _ => None,
        }
    }

    /// As a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// As an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// As an array of strings, packed or not; `None` when any element is not a string.
    pub fn strings(&self) -> Option<Vec<&str>> {
        match self {
            Value::Strings(s) => Some(s.iter().collect()),
            Value::Array(a) => a.iter().map(Value::as_str).collect(),
            _ => None,
        }
    }

    /// As an array of numbers, packed or not; `None` when any element is not a number.
    pub fn numbers(&self) -> Option<Vec<f64>> {
        match self {
            Value::Numbers(n) => Some(n.clone()),
            Value::Array(a) => a.iter().map(Value::as_f64).collect(),
            _ => None,
        }
    }
}

pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    pub(super) path: &'a Path,
}

impl Reader<'_> {
    pub(super) fn err(&self, what: &str) -> Error {
        Error::Weights {
            path: self.path.to_path_buf(),
            msg: format!(
                "{what} at byte {}; the file is truncated or not GGUF",
                self.pos
            ),
        }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| self.err("unexpected end of header"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(super) fn len(&mut self) -> Result<usize> {
        let n = self.u64()?;
        // Nothing in a header is longer than the file itself.
        if n as usize > self.buf.len() {
            return Err(self.err("implausible length"));
        }
        Ok(n as usize)
    }

    pub(super) fn string(&mut self) -> Result<String> {
        let n = self.len()?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("invalid UTF-8 string"))
    }

    /// One metadata value of type `ty`; arrays nest at most [`MAX_DEPTH`] deep.
    pub(super) fn value(&mut self, ty: u32) -> Result<Value> {
        self.value_at(ty, 0)
    }

    fn value_at(&mut self, ty: u32, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(self.err(&format!("metadata arrays nested deeper than {MAX_DEPTH}")));
        }
        Ok(match ty {
            0 => Value::U(self.take(1)?[0] as u64),
            1 => Value::I(self.take(1)?[0] as i8 as i64),
            2 => {
                let b = self.take(2)?;
                Value::U(u16::from_le_bytes([b[0], b[1]]) as u64)
            }
            3 => {
                let b = self.take(2)?;
                Value::I(i16::from_le_bytes([b[0], b[1]]) as i64)
            }
            4 => Value::U(self.u32()? as u64),
            5 => Value::I(self.u32()? as i32 as i64),
            6 => Value::F(f32::from_bits(self.u32()?) as f64),
            7 => Value::Bool(self.take(1)?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                let inner = self.u32()?;
                let n = self.len()?;
                if n > PACK_OVER && inner == 8 {
                    let mut s = StrArray::default();
                    for _ in 0..n {
                        let len = self.len()?;
                        let (buf, start) = (self.buf, self.pos);
                        self.take(len)?;
                        match std::str::from_utf8(&buf[start..start + len]) {
                            Ok(text) => s.text.push_str(text),
                            Err(_) => return Err(self.err("invalid UTF-8 string")),
                        }
                        s.ends.push(s.text.len());
                    }
                    return Ok(Value::Strings(s));
                }
                if n > PACK_OVER && matches!(inner, 0..=7 | 10..=12) {
                    let mut v = Vec::with_capacity(n.min(1 << 24));
                    for _ in 0..n {
                        let x = self.value_at(inner, depth + 1)?;
                        v.push(x.as_f64().unwrap_or_default());
                    }
                    return Ok(Value::Numbers(v));
                }
                let mut v = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    v.push(self.value_at(inner, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U(self.u64()?),
            11 => Value::I(self.u64()? as i64),
            12 => Value::F(f64::from_bits(self.u64()?)),
            other => return Err(self.err(&format!("unknown metadata type {other}"))),
        })
    }
}
