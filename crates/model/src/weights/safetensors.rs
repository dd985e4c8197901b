//! Hugging Face safetensors checkpoints: a single `model.safetensors` or shards listed by
//! `model.safetensors.index.json`, memory-mapped. F32/F16/BF16 weights are used in place; what
//! must be transformed is converted to f32 one tensor at a time and its pages released.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::{Blocks, Bytes, RawTensor, TensorSource, canonical_name, check_shape};
use crate::error::{Error, Result};
use gemma_kernels::quant::GgmlType;

/// Where one tensor lies.
struct Entry {
    file: usize,
    stored: String,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range in the file.
    range: Range<usize>,
}

/// The weights of one safetensors checkpoint directory.
pub struct SafetensorsSource {
    files: Vec<(PathBuf, Arc<Mmap>)>,
    /// Canonical name → where it lies.
    index: HashMap<String, Entry>,
    /// The single file, or the shard index: where a missing tensor should have been.
    listing: PathBuf,
}

impl SafetensorsSource {
    /// Opens the checkpoint in `dir`, sharded or not.
    pub fn open(dir: &Path) -> Result<Self> {
        let index_path = dir.join("model.safetensors.index.json");
        let sharded = index_path.exists();
        let paths: Vec<PathBuf> = if sharded {
            let text =
                std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Weights {
                    path: index_path.clone(),
                    msg: format!("not valid JSON: {e}"),
                })?;
            let map = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| Error::Weights {
                    path: index_path.clone(),
                    msg: "no `weight_map` object".into(),
                })?;
            let mut shards: Vec<String> = map
                .values()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            shards.sort();
            shards.dedup();
            shards.into_iter().map(|s| dir.join(s)).collect()
        } else {
            let single = dir.join("model.safetensors");
            if !single.exists() {
                return Err(Error::Weights {
                    path: dir.to_path_buf(),
                    msg: "no model.safetensors or model.safetensors.index.json here".into(),
                });
            }
            vec![single]
        };

        let mut files = Vec::with_capacity(paths.len());
        let mut index = HashMap::new();
        for (i, path) in paths.into_iter().enumerate() {
            let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
            // SAFETY-free: memmap2's map is `unsafe` only because another process could truncate
            // the file while it is mapped; we read it once at load time.
            let mmap = map_file(&file).map_err(|e| Error::io(&path, e))?;
            let (header, meta) = SafeTensors::read_metadata(&mmap).map_err(|e| Error::Weights {
                path: path.clone(),
                msg: format!("unreadable header ({e}); the file may be truncated"),
            })?;
            let base = 8 + header;
            for (name, info) in meta.tensors() {
                if let Some(canon) = canonical_name(&name) {
                    let (start, end) = info.data_offsets;
                    index.insert(
                        canon.to_string(),
                        Entry {
                            file: i,
                            dtype: info.dtype,
                            shape: info.shape.clone(),
                            range: base + start..base + end,
                            stored: name,
                        },
                    );
                }
            }
            files.push((path, Arc::new(mmap)));
        }
        let listing = if sharded {
            index_path
        } else {
            files[0].0.clone()
        };
        Ok(Self {
            files,
            index,
            listing,
        })
    }
}

impl SafetensorsSource {
    /// The GGML type of a stored dtype: F32, F16 and BF16 are read; anything else is refused.
    fn ggml_type(&self, e: &Entry) -> Result<GgmlType> {
        match e.dtype {
            Dtype::F32 => Ok(GgmlType::F32),
            Dtype::F16 => Ok(GgmlType::F16),
            Dtype::BF16 => Ok(GgmlType::BF16),
            other => Err(Error::Weights {
                path: self.files[e.file].0.clone(),
                msg: format!(
                    "tensor `{}` has dtype {other:?}; supported are F32, F16 and BF16",
                    e.stored
                ),
            }),
        }
    }
}

#[allow(unsafe_code)]
pub(crate) fn map_file(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: the mapping is read-only and lives as long as the source; a concurrent truncation
    // of the checkpoint by another process is the one hazard, as with every mmap loader.
    unsafe { Mmap::map(file) }
}

impl TensorSource for SafetensorsSource {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(e) = self.index.get(name) else {
            return Ok(None);
        };
        let (_, mmap) = &self.files[e.file];
        let ty = self.ggml_type(e)?;
        let data = ty.dequantize(&mmap[e.range.clone()]);
        gemma_kernels::bytes::release(mmap, e.range.clone());
        Ok(Some(RawTensor {
            shape: e.shape.clone(),
            data,
        }))
    }

    fn blocks(&self, name: &str, expected: &[usize]) -> Result<Blocks> {
        let e = self.index.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            expected: expected.to_vec(),
            path: self.listing.clone(),
        })?;
        let path = self.files[e.file].0.clone();
        check_shape(name, &e.shape, expected, path)?;
        Ok(Blocks {
            ty: self.ggml_type(e)?,
            shape: e.shape.clone(),
            bytes: Bytes::mapped(self.files[e.file].1.clone(), e.range.clone()),
        })
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.index.get(name).map(|e| e.shape.clone())
    }

    fn path_of(&self, name: &str) -> PathBuf {
        match self.index.get(name) {
            Some(e) => self.files[e.file].0.clone(),
            None => self.listing.clone(),
        }
    }
}
