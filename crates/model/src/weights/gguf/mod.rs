//! GGUF v2/v3 files: header, metadata, tensor infos and the memory-mapped data section. Tensors
//! are exposed under canonical Hugging Face names, either in their blocks straight from the
//! mapping or dequantized to f32 (after which their pages are released).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::{Blocks, Bytes, RawTensor, TensorSource, check_shape};
use crate::error::{Error, Result};
use gemma_kernels::quant::GgmlType;

mod metadata;

use self::metadata::Reader;
pub use self::metadata::{StrArray, Value};

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

impl GgufFile {
    /// Opens and indexes a GGUF file; tensor data stays mapped, not read.
    pub fn open(path: &Path) -> Result<Self> {
        // Opening a FIFO would wait for a writer for ever: only a regular file is opened.
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            let why = "not a regular file (a pipe, a device or a folder): name a .gguf file";
            return Err(Error::io(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
            ));
        }
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mmap = super::safetensors::map_file(&file).map_err(|e| Error::io(path, e))?;
        let mut r = Reader {
            buf: &mmap,
            pos: 0,
            path,
        };
        let (n_tensors, metadata) = header(&mut r)?;
        let infos = tensor_infos(&mut r, n_tensors)?;
        let align = metadata
            .get("general.alignment")
            .and_then(Value::as_u64)
            .unwrap_or(32) as usize;
        let align = align.max(1);
        let data_start = r
            .pos
            .div_ceil(align)
            .checked_mul(align)
            .filter(|&s| s <= mmap.len())
            .ok_or_else(|| r.err(&format!("general.alignment = {align} is implausible")))?;
        let mut tensors = HashMap::new();
        for (name, shape, type_id, offset) in infos {
            let info = place(&r, &name, shape, type_id, data_start, offset)?;
            tensors.insert(name, info);
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
        gemma_kernels::bytes::release(&self.mmap, info.offset..info.offset + info.len);
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

/// A tensor as its info lists it: name, shape (outermost first), GGML type id, data offset.
type RawInfo = (String, Vec<usize>, u32, usize);

/// An error about the whole file (not at the reader's place).
fn whole(r: &Reader<'_>, msg: String) -> Error {
    Error::Weights {
        path: r.path.to_path_buf(),
        msg,
    }
}

/// The magic, the version, the tensor count and the metadata.
fn header(r: &mut Reader<'_>) -> Result<(usize, HashMap<String, Value>)> {
    if r.take(4).ok() != Some(b"GGUF".as_slice()) {
        return Err(whole(r, "not a GGUF file (bad magic)".into()));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(whole(
            r,
            format!("GGUF version {version} is not supported (2 or 3)"),
        ));
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
    Ok((n_tensors, metadata))
}

/// The `n` tensor infos after the metadata.
fn tensor_infos(r: &mut Reader<'_>, n: usize) -> Result<Vec<RawInfo>> {
    // Each tensor info takes at least 24 bytes: no more can follow than that allows.
    let mut infos = Vec::with_capacity(n.min(r.buf.len() / 24));
    for _ in 0..n {
        let name = r.string()?;
        let n_dims = r.u32()? as usize;
        if !(1..=4).contains(&n_dims) {
            return Err(r.err(&format!(
                "tensor `{name}` has {n_dims} dimensions (GGUF stores 1 to 4)"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            let d = r.len()?;
            if d == 0 {
                return Err(r.err(&format!("tensor `{name}` has a dimension of 0")));
            }
            dims.push(d);
        }
        let type_id = r.u32()?;
        let offset = r.u64()? as usize;
        dims.reverse();
        infos.push((name, dims, type_id, offset));
    }
    Ok(infos)
}

/// Where a tensor's bytes lie in the file, checked to lie inside it.
fn place(
    r: &Reader<'_>,
    name: &str,
    shape: Vec<usize>,
    type_id: u32,
    data_start: usize,
    offset: usize,
) -> Result<TensorInfo> {
    let n = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| r.err(&format!("tensor `{name}` is larger than memory")))?;
    let len = GgmlType::from_id(type_id)
        .and_then(|t| t.bytes_for(n))
        .unwrap_or(0);
    let end = data_start
        .checked_add(offset)
        .and_then(|s| s.checked_add(len));
    let size = r.buf.len();
    let Some(end) = end.filter(|&e| e <= size) else {
        return Err(whole(
            r,
            format!(
                "tensor `{name}` lies past the end of the file ({size} bytes, data from byte \
                 {data_start}, offset {offset}, {len} bytes): the file is truncated or \
                 damaged; download it again"
            ),
        ));
    };
    Ok(TensorInfo {
        shape,
        type_id,
        offset: end - len,
        len,
    })
}
