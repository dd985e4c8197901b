//! GGUF v2/v3 files: header, metadata, tensor infos and the memory-mapped data section. Tensors
//! are exposed under canonical Hugging Face names, either in their blocks straight from the
//! mapping or dequantized to f32 (after which their pages are released).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::quant::GgmlType;
use super::{Blocks, Bytes, RawTensor, TensorSource, check_shape};
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

/// Where one tensor lives in the file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Shape in PyTorch order (outermost first): GGUF's dims reversed.
    pub shape: Vec<usize>,
    /// GGML type id.
    pub type_id: u32,
    /// Byte offset from the start of the file.
    pub offset: usize,
    /// Byte length.
    pub len: usize,
}

/// An opened GGUF file.
pub struct GgufFile {
    path: PathBuf,
    mmap: Arc<Mmap>,
    /// Metadata key → value.
    pub metadata: HashMap<String, Value>,
    /// GGUF tensor name → location.
    pub tensors: HashMap<String, TensorInfo>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl Reader<'_> {
    fn err(&self, what: &str) -> Error {
        Error::Weights {
            path: self.path.to_path_buf(),
            msg: format!(
                "{what} at byte {}; the file is truncated or not GGUF",
                self.pos
            ),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| self.err("unexpected end of header"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len(&mut self) -> Result<usize> {
        let n = self.u64()?;
        // Nothing in a header is longer than the file itself.
        if n as usize > self.buf.len() {
            return Err(self.err("implausible length"));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String> {
        let n = self.len()?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("invalid UTF-8 string"))
    }

    fn value(&mut self, ty: u32) -> Result<Value> {
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
                        let x = self.value(inner)?;
                        v.push(x.as_f64().unwrap_or_default());
                    }
                    return Ok(Value::Numbers(v));
                }
                let mut v = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    v.push(self.value(inner)?);
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

impl GgufFile {
    /// Opens and indexes a GGUF file; tensor data stays mapped, not read.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mmap = super::safetensors::map_file(&file).map_err(|e| Error::io(path, e))?;
        let mut r = Reader {
            buf: &mmap,
            pos: 0,
            path,
        };
        if r.take(4).ok() != Some(b"GGUF".as_slice()) {
            return Err(Error::Weights {
                path: path.to_path_buf(),
                msg: "not a GGUF file (bad magic)".into(),
            });
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(Error::Weights {
                path: path.to_path_buf(),
                msg: format!("GGUF version {version} is not supported (2 or 3)"),
            });
        }
        let n_tensors = r.len()?;
        let n_kv = r.len()?;
        let mut metadata = HashMap::new();
        for _ in 0..n_kv {
            let key = r.string()?;
            let ty = r.u32()?;
            let v = r.value(ty)?;
            metadata.insert(key, v);
        }
        let mut infos = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = r.string()?;
            let n_dims = r.u32()? as usize;
            if n_dims > 8 {
                return Err(r.err(&format!("tensor `{name}` has {n_dims} dimensions")));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(r.len()?);
            }
            let type_id = r.u32()?;
            let offset = r.u64()? as usize;
            dims.reverse();
            infos.push((name, dims, type_id, offset));
        }
        let align = metadata
            .get("general.alignment")
            .and_then(Value::as_u64)
            .unwrap_or(32) as usize;
        let data_start = r.pos.div_ceil(align.max(1)) * align.max(1);
        let mut tensors = HashMap::new();
        for (name, shape, type_id, offset) in infos {
            let n: usize = shape.iter().product();
            let len = GgmlType::from_id(type_id)
                .and_then(|t| t.bytes_for(n))
                .unwrap_or(0);
            let start = data_start + offset;
            if start + len > mmap.len() {
                return Err(Error::Weights {
                    path: path.to_path_buf(),
                    msg: format!(
                        "tensor `{name}` ends at byte {} but the file has {}: the file is \
                         truncated; download it again",
                        start + len,
                        mmap.len()
                    ),
                });
            }
            tensors.insert(
                name,
                TensorInfo {
                    shape,
                    type_id,
                    offset: start,
                    len,
                },
            );
        }
        Ok(Self {
            path: path.to_path_buf(),
            mmap: Arc::new(mmap),
            metadata,
            tensors,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The raw bytes of a tensor.
    pub fn bytes(&self, info: &TensorInfo) -> &[u8] {
        &self.mmap[info.offset..info.offset + info.len]
    }

    /// The type of the tensor stored under its GGUF name: an error naming the type and the
    /// supported list when gemma-chat cannot read it, or when its rows are not whole blocks.
    fn type_of(&self, name: &str, info: &TensorInfo) -> Result<GgmlType> {
        let ty = GgmlType::from_id(info.type_id).ok_or_else(|| Error::Weights {
            path: self.path.clone(),
            msg: format!(
                "tensor `{name}` has type {}, which gemma-chat cannot read (supported: {})",
                GgmlType::name_of(info.type_id),
                GgmlType::supported_list()
            ),
        })?;
        let (per, _) = ty.block();
        let cols = info.shape.last().copied().unwrap_or(1);
        if !cols.is_multiple_of(per) {
            return Err(Error::Weights {
                path: self.path.clone(),
                msg: format!(
                    "tensor `{name}` has rows of {cols} values, not whole {} blocks of {per}",
                    ty.name()
                ),
            });
        }
        Ok(ty)
    }

    /// Dequantizes the tensor stored under its GGUF name, then releases its pages.
    pub fn dequantize(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(info) = self.tensors.get(name) else {
            return Ok(None);
        };
        let ty = self.type_of(name, info)?;
        let data = ty.dequantize(self.bytes(info));
        super::bytes::release(&self.mmap, info.offset..info.offset + info.len);
        Ok(Some(RawTensor {
            shape: info.shape.clone(),
            data,
        }))
    }

    /// The tensor stored under its GGUF name, in its blocks, used in place.
    pub fn blocks(&self, name: &str) -> Result<Option<Blocks>> {
        let Some(info) = self.tensors.get(name) else {
            return Ok(None);
        };
        Ok(Some(Blocks {
            ty: self.type_of(name, info)?,
            shape: info.shape.clone(),
            bytes: Bytes::mapped(self.mmap.clone(), info.offset..info.offset + info.len),
        }))
    }
}

/// A GGUF file seen through canonical Hugging Face tensor names.
#[derive(Debug)]
pub struct GgufSource {
    file: GgufFile,
    /// Canonical name → GGUF name.
    names: HashMap<String, String>,
}

impl GgufSource {
    /// Wraps an opened file, mapping every tensor name it knows.
    pub fn new(file: GgufFile) -> Self {
        let names = file
            .tensors
            .keys()
            .filter_map(|g| canonical(g).map(|c| (c, g.clone())))
            .collect();
        Self { file, names }
    }

    /// The underlying file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}

impl TensorSource for GgufSource {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        match self.names.get(name) {
            Some(g) => self.file.dequantize(g),
            None => Ok(None),
        }
    }

    fn blocks(&self, name: &str, expected: &[usize]) -> Result<Blocks> {
        let found = match self.names.get(name) {
            Some(g) => self.file.blocks(g)?,
            None => None,
        };
        let b = found.ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            expected: expected.to_vec(),
            path: self.file.path.clone(),
        })?;
        check_shape(name, &b.shape, expected, self.file.path.clone())?;
        Ok(b)
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let g = self.names.get(name)?;
        self.file.tensors.get(g).map(|t| t.shape.clone())
    }

    fn path_of(&self, _name: &str) -> PathBuf {
        self.file.path.clone()
    }
}

/// llama.cpp's tensor names → the canonical Hugging Face names (prefix stripped).
fn canonical(gguf: &str) -> Option<String> {
    const GLOBAL: [(&str, &str); 6] = [
        ("token_embd.weight", "embed_tokens.weight"),
        ("output_norm.weight", "norm.weight"),
        ("output.weight", "lm_head.weight"),
        (
            "per_layer_token_embd.weight",
            "embed_tokens_per_layer.weight",
        ),
        (
            "per_layer_model_proj.weight",
            "per_layer_model_projection.weight",
        ),
        (
            "per_layer_proj_norm.weight",
            "per_layer_projection_norm.weight",
        ),
    ];
    // Per block: GGUF suffix → HF suffix.
    const BLOCK: [(&str, &str); 25] = [
        ("attn_norm.weight", "input_layernorm.weight"),
        ("attn_q.weight", "self_attn.q_proj.weight"),
        ("attn_k.weight", "self_attn.k_proj.weight"),
        ("attn_v.weight", "self_attn.v_proj.weight"),
        ("attn_output.weight", "self_attn.o_proj.weight"),
        ("attn_q_norm.weight", "self_attn.q_norm.weight"),
        ("attn_k_norm.weight", "self_attn.k_norm.weight"),
        (
            "post_attention_norm.weight",
            "post_attention_layernorm.weight",
        ),
        ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
        ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
        ("ffn_gate.weight", "mlp.gate_proj.weight"),
        ("ffn_up.weight", "mlp.up_proj.weight"),
        ("ffn_down.weight", "mlp.down_proj.weight"),
        ("layer_output_scale.weight", "layer_scalar"),
        ("inp_gate.weight", "per_layer_input_gate.weight"),
        ("proj.weight", "per_layer_projection.weight"),
        ("post_norm.weight", "post_per_layer_input_norm.weight"),
        ("ffn_gate_inp.weight", "router.proj.weight"),
        ("ffn_gate_inp.scale", "router.scale"),
        ("ffn_down_exps.scale", "router.per_expert_scale"),
        ("ffn_gate_up_exps.weight", "experts.gate_up_proj"),
        ("ffn_down_exps.weight", "experts.down_proj"),
        (
            "pre_ffw_norm_2.weight",
            "pre_feedforward_layernorm_2.weight",
        ),
        (
            "post_ffw_norm_1.weight",
            "post_feedforward_layernorm_1.weight",
        ),
        (
            "post_ffw_norm_2.weight",
            "post_feedforward_layernorm_2.weight",
        ),
    ];
    if let Some((_, hf)) = GLOBAL.iter().find(|(g, _)| *g == gguf) {
        return Some(hf.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (idx, suffix) = rest.split_once('.')?;
    let i: usize = idx.parse().ok()?;
    BLOCK
        .iter()
        .find(|(g, _)| *g == suffix)
        .map(|(_, hf)| format!("layers.{i}.{hf}"))
}
