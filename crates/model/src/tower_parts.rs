//! The host-side pieces every tower is built of: a stored tensor as a host matrix ([`matrix`],
//! [`from_blocks`]) or as f32 values ([`values`]), products on the host kernels ([`products`])
//! and an RMSNorm for host rows ([`norm`]). The vision and audio towers share them.

use gemma_kernels::qmatmul::QMatrix;

use crate::error::{Error, Result};
use crate::model::fused::host_products;
use crate::model::ops::RmsNorm;
use crate::weights::{Blocks, TensorSource};

/// `x · Wᵀ` for `t` rows (the fused step's products).
pub(crate) fn products(w: &QMatrix, x: &[f32], t: usize) -> Vec<f32> {
    host_products(&[w], x, t).remove(0)
}

/// An RMSNorm of `w` (none: weightless) for the host rows (`norm_rows`).
pub(crate) fn norm(w: Option<Vec<f32>>, eps: f64) -> RmsNorm {
    RmsNorm {
        weight: None,
        host: w,
        eps,
    }
}

/// Stored blocks of the tensor `name` as a host matrix.
pub(crate) fn from_blocks(src: &dyn TensorSource, name: &str, b: Blocks) -> Result<QMatrix> {
    let (ty, shape) = (b.ty, b.shape.clone());
    QMatrix::from_blocks(b).ok_or_else(|| Error::Weights {
        path: src.path_of(name),
        msg: format!(
            "tensor `{name}` ({shape:?}) is not whole {} blocks",
            ty.name()
        ),
    })
}

/// The stored tensor `name` as a host matrix, checked against `shape`.
pub(crate) fn matrix(src: &dyn TensorSource, name: &str, shape: &[usize]) -> Result<QMatrix> {
    from_blocks(src, name, src.blocks(name, shape)?)
}

/// The stored tensor `name` as f32 values, checked against `shape`.
pub(crate) fn values(src: &dyn TensorSource, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    Ok(src.require(name, shape)?.data)
}
