//! AVX-VNNI kernels (`vpdpwssd` on 256 bits, for the CPUs that have it without AVX-512): the
//! super-block types' integer sums of `avx2/ksum.rs` with the multiply and the add fused; every
//! other type as at AVX2.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::avx2::ksum::{self, Madd};
use super::{QuantRow, avx2, simd};
use crate::quant::GgmlType;

/// Whether this CPU runs these kernels (and `GEMMA_CHAT_SIMD` allows them).
pub(super) fn available() -> bool {
    simd::avx_vnni()
}

/// `vpdpwssd`: the pairs' products added to the accumulator in one instruction.
struct AvxVnni;

impl Madd for AvxVnni {
    #[inline(always)]
    unsafe fn madd(acc: __m256i, c: __m256i, x: __m256i) -> __m256i {
        // SAFETY: the caller's contract (AVX-VNNI).
        unsafe { _mm256_dpwssd_avx_epi32(acc, c, x) }
    }
}

pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: `available()` was checked by the caller; the kernels read whole super-blocks of
    // `w` (checked in `QMatrix::new`) and the per-256 form of `x` (`reads_super` in `mod.rs`),
    // every load bounds-checked.
    unsafe {
        match ty {
            GgmlType::Q4_K => q4_k(w, x),
            GgmlType::Q5_K => q5_k(w, x),
            GgmlType::Q6_K => q6_k(w, x),
            _ => avx2::dot(ty, w, x),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q4_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { ksum::k_blocks::<AvxVnni>(w, 144, x, false) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q5_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { ksum::k_blocks::<AvxVnni>(w, 176, x, true) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { ksum::q6_k_with::<AvxVnni>(w, x) }
}
