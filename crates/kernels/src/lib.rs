//! The kernels below the model: GGML's block layouts ([`quant`]: every type gemma-chat reads, as
//! stored, decoded exactly), the bytes they live in, mapped or owned ([`bytes`]), and the host
//! matrix products over them, per SIMD level, threaded ([`qmatmul`]). The model crate composes
//! these; nothing here knows of a model.

#[macro_use]
mod levels;

pub mod bytes;
pub mod qmatmul;
pub mod quant;
pub mod vmath;

pub use bytes::Bytes;
use quant::GgmlType;

/// One weight tensor as stored: its GGML type (float types included) and its bytes, used in
/// place.
#[derive(Clone)]
pub struct Blocks {
    /// The stored type.
    pub ty: GgmlType,
    /// Shape, outermost first; the innermost dimension is a whole number of blocks.
    pub shape: Vec<usize>,
    /// Row-major blocks.
    pub bytes: Bytes,
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blocks({}, {:?})", self.ty.name(), self.shape)
    }
}
