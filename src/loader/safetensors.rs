//! Hugging Face safetensors checkpoints: a single `model.safetensors` or shards listed by
//! `model.safetensors.index.json`, memory-mapped and converted to f32 one tensor at a time.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::{RawTensor, TensorSource, canonical_name};
use crate::error::{Error, Result};

/// The weights of one safetensors checkpoint directory.
pub struct SafetensorsSource {
    files: Vec<(PathBuf, Mmap)>,
    /// Canonical name → (file index, name as stored).
    index: HashMap<String, (usize, String)>,
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
            let names = SafeTensors::read_metadata(&mmap)
                .map_err(|e| Error::Weights {
                    path: path.clone(),
                    msg: format!("unreadable header ({e}); the file may be truncated"),
                })?
                .1
                .tensors()
                .into_keys()
                .collect::<Vec<_>>();
            for name in names {
                if let Some(canon) = canonical_name(&name) {
                    index.insert(canon.to_string(), (i, name));
                }
            }
            files.push((path, mmap));
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

#[allow(unsafe_code)]
pub(crate) fn map_file(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: the mapping is read-only and lives as long as the source; a concurrent truncation
    // of the checkpoint by another process is the one hazard, as with every mmap loader.
    unsafe { Mmap::map(file) }
}

impl TensorSource for SafetensorsSource {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some((file, stored)) = self.index.get(name) else {
            return Ok(None);
        };
        let (path, mmap) = &self.files[*file];
        let bad = |msg: String| Error::Weights {
            path: path.clone(),
            msg,
        };
        let st = SafeTensors::deserialize(mmap).map_err(|e| bad(format!("{e}")))?;
        let view = st
            .tensor(stored)
            .map_err(|e| bad(format!("tensor `{stored}`: {e}")))?;
        let bytes = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(bad(format!(
                    "tensor `{stored}` has dtype {other:?}; supported are F32, F16 and BF16"
                )));
            }
        };
        Ok(Some(RawTensor {
            shape: view.shape().to_vec(),
            data,
        }))
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let (file, stored) = self.index.get(name)?;
        let st = SafeTensors::deserialize(&self.files[*file].1).ok()?;
        st.tensor(stored).ok().map(|v| v.shape().to_vec())
    }

    fn path_of(&self, name: &str) -> PathBuf {
        match self.index.get(name) {
            Some((file, _)) => self.files[*file].0.clone(),
            None => self.listing.clone(),
        }
    }
}
