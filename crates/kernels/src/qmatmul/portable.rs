//! The portable kernel of every GGML type — the fallback on any CPU, and the reference the SIMD
//! kernels are tested against: the 32-value blocks and floats from `scalar.rs`, the 256-value
//! super-blocks from `scalar_k.rs`.

use super::{QuantRow, scalar, scalar_k};
use crate::quant::GgmlType;

/// One weight row of type `ty` against the input row `x`.
pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    match ty {
        GgmlType::F32 => scalar::f32s(w, x),
        GgmlType::F16 => scalar::f16s(w, x),
        GgmlType::BF16 => scalar::bf16s(w, x),
        GgmlType::Q4_0 => scalar::q4_0(w, x),
        GgmlType::Q4_1 => scalar::q4_1(w, x),
        GgmlType::Q5_0 => scalar::q5_0(w, x),
        GgmlType::Q5_1 => scalar::q5_1(w, x),
        GgmlType::Q8_0 => scalar::q8_0(w, x),
        GgmlType::IQ4_NL => scalar::iq4_nl(w, x),
        GgmlType::Q2_K => scalar_k::q2_k(w, x),
        GgmlType::Q3_K => scalar_k::q3_k(w, x),
        GgmlType::Q4_K => scalar_k::q4_k(w, x),
        GgmlType::Q5_K => scalar_k::q5_k(w, x),
        GgmlType::Q6_K => scalar_k::q6_k(w, x),
        GgmlType::IQ4_XS => scalar_k::iq4_xs(w, x),
    }
}
