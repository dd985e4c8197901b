//! Weight loading: turns a model path into named host tensors ([`RawTensor`]) for the model
//! builder, whatever the file format.
//!
//! Formats live in their own files; each maps its names onto the canonical Hugging Face text-tower
//! names (`layers.3.self_attn.q_proj.weight`, prefix stripped).

pub mod gguf;
pub mod safetensors;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use gemma_kernels::{Blocks, Bytes};

/// One weight tensor on the host, already converted to f32.
#[derive(Debug, Clone)]
pub struct RawTensor {
    /// Shape, outermost first (PyTorch order).
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<f32>,
}

/// A source of named weight tensors.
pub trait TensorSource {
    /// The tensor stored under a canonical name, converted to f32, or `None` when absent.
    fn get(&self, name: &str) -> Result<Option<RawTensor>>;
    /// The shape stored under a canonical name, without reading the data.
    fn shape(&self, name: &str) -> Option<Vec<usize>>;
    /// The file that holds (or would hold) a tensor, for error messages.
    fn path_of(&self, name: &str) -> PathBuf;

    /// The tensor under `name` in its stored type, bytes used in place, checked against
    /// `expected`; a clear error when absent, mis-shaped, or stored in a type gemma-chat cannot
    /// read (named, with the supported list).
    fn blocks(&self, name: &str, expected: &[usize]) -> Result<Blocks>;

    /// The tensor under `name`, checked against `expected`; a clear error when absent or
    /// mis-shaped.
    fn require(&self, name: &str, expected: &[usize]) -> Result<RawTensor> {
        let t = self.get(name)?.ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            expected: expected.to_vec(),
            path: self.path_of(name),
        })?;
        check_shape(name, &t.shape, expected, self.path_of(name))?;
        Ok(t)
    }

    /// Like [`TensorSource::require`], but `None` when the tensor is absent.
    fn optional(&self, name: &str, expected: &[usize]) -> Result<Option<RawTensor>> {
        match self.get(name)? {
            None => Ok(None),
            Some(t) => {
                check_shape(name, &t.shape, expected, self.path_of(name))?;
                Ok(Some(t))
            }
        }
    }
}

pub(crate) fn check_shape(
    name: &str,
    actual: &[usize],
    expected: &[usize],
    path: PathBuf,
) -> Result<()> {
    // A [1]-shaped scalar may be stored as a 0-d tensor.
    let scalar = |s: &[usize]| s.iter().product::<usize>() == 1 && s.len() <= 1;
    if actual == expected || (scalar(actual) && scalar(expected)) {
        return Ok(());
    }
    Err(Error::TensorShape {
        name: name.to_string(),
        expected: expected.to_vec(),
        actual: actual.to_vec(),
        path,
    })
}

/// Strips the checkpoint prefixes: the text tower's names lose theirs (`layers.3.…`), the vision
/// and audio towers' keep their module (`vision_tower.…`, `embed_vision.…`, `vision_embedder.…`,
/// `audio_tower.…`, `embed_audio.…`, which no text name starts with); `None` for tensors
/// gemma-chat does not read (the 12B's audio embedder, Gemma 3's projector).
pub fn canonical_name(name: &str) -> Option<&str> {
    for skip in [
        "model.audio_embedder.",
        "model.multi_modal_projector.",
        "multi_modal_projector.",
    ] {
        if name.starts_with(skip) {
            return None;
        }
    }
    for prefix in ["model.language_model.", "language_model.model.", "model."] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return Some(rest);
        }
    }
    Some(name)
}

/// The directory holding a model's files: the path itself, or its parent for a file path.
pub fn model_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}
