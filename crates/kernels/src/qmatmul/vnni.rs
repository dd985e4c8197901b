//! AVX-512 VNNI kernels of Q4_K, Q5_K and Q6_K against the input's digits with one scale per
//! 256 values ([`QuantRow::q256`]): each sub-block's integer scale is folded into its codes
//! (`vpmullw`; at most 31·63 for Q4_K/Q5_K and 32·128 for Q6_K, inside i16), and `vpdpwssd`
//! sums the whole super-block against each digit in integers, so a super-block needs two
//! conversions to float instead of two per 32 values. The sums fit in i32: per lane at most
//! 8 · 2 · 1953 · 32767 ≈ 1.0e9 (Q6_K, up to 2 · 4096 · 32767 per sub-block, uses two
//! accumulators of four sub-blocks each). Exact like the other kernels: only the order of the
//! float additions differs.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::avx2::f16_at;
use super::avx2::kquants::{k_codes, q6_codes};
use super::scalar_k::scale_min;
use super::{LO, QuantRow, SUPER, avx512, simd};
use crate::quant::GgmlType;

/// Whether this CPU runs these kernels (and `GEMMA_CHAT_SIMD` allows them).
pub(super) fn available() -> bool {
    simd::level() >= simd::Simd::Avx512Vnni
}

/// The AVX-512 kernels, with these for the types they cover.
pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: `available()` was checked by the caller; every kernel reads whole super-blocks of
    // `w` (checked in `QMatrix::new`) and the matching values of `x`, padded to whole 256s (a
    // product quantizes the per-256 form for these types: `reads_super` in `mod.rs`; without
    // it the bounds-checked loads panic, they never read past it).
    unsafe {
        match ty {
            GgmlType::Q4_K => k_blocks(w, 144, x, false),
            GgmlType::Q5_K => k_blocks(w, 176, x, true),
            GgmlType::Q6_K => q6_k(w, x),
            _ => avx512::dot(ty, w, x),
        }
    }
}

/// 32 i16 of `digits` from `at`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn load_digits(digits: &[i16], at: usize) -> __m512i {
    assert!(at + 32 <= digits.len());
    // SAFETY: checked just above.
    unsafe { _mm512_loadu_si512(digits.as_ptr().add(at) as *const __m512i) }
}

/// `hi + lo · 2⁻¹⁵` of two integer sums, in f32 lanes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn join(hi: __m512i, lo: __m512i) -> __m512 {
    _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(lo),
        _mm512_set1_ps(LO),
        _mm512_cvtepi32_ps(hi),
    )
}

/// Q4_K and Q5_K (`fifth`: the 32 high-bit bytes follow the scales).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn k_blocks(w: &[u8], bytes: usize, x: &QuantRow, fifth: bool) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut mins = 0f32;
    for (sb, blk) in w.chunks_exact(bytes).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let scales = &blk[4..16];
        let (mut hi, mut lo) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut msum = 0f32;
        for n in 0..4 {
            for (half, codes) in unsafe { k_codes(blk, fifth, n) }.into_iter().enumerate() {
                let j = 2 * n + half;
                let (sc, m) = scale_min(j, scales);
                let c =
                    _mm512_mullo_epi16(_mm512_cvtepu8_epi16(codes), _mm512_set1_epi16(sc as i16));
                let at = sb * SUPER + 32 * j;
                unsafe {
                    hi = _mm512_dpwssd_epi32(hi, c, load_digits(&x.q256, at));
                    lo = _mm512_dpwssd_epi32(lo, c, load_digits(&x.lo256, at));
                }
                msum += m as f32 * x.sum32[sb * 8 + j];
            }
        }
        acc = _mm512_fmadd_ps(join(hi, lo), _mm512_set1_ps(d * x.d256[sb]), acc);
        mins += dmin * x.d256[sb] * msum;
    }
    _mm512_reduce_add_ps(acc) - mins
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let m32 = _mm256_set1_epi8(32);
    for (sb, blk) in w.chunks_exact(210).enumerate() {
        let d = f16_at(blk, 208);
        // One pair of accumulators per half of the super-block: four sub-blocks each.
        let mut sums = [(_mm512_setzero_si512(), _mm512_setzero_si512()); 2];
        for (h, (hi, lo)) in sums.iter_mut().enumerate() {
            unsafe {
                let codes = q6_codes(blk, h);
                for (k, c) in codes.into_iter().enumerate() {
                    // Signed values −32..31, each 16 times its 16-value group's i8 scale.
                    let c = _mm512_cvtepi8_epi16(_mm256_sub_epi8(c, m32));
                    let sc = &blk[192 + h * 8 + 2 * k..];
                    let s = _mm512_mask_blend_epi16(
                        0xFFFF_0000,
                        _mm512_set1_epi16(sc[0] as i8 as i16),
                        _mm512_set1_epi16(sc[1] as i8 as i16),
                    );
                    let c = _mm512_mullo_epi16(c, s);
                    let at = sb * SUPER + (h * 4 + k) * 32;
                    *hi = _mm512_dpwssd_epi32(*hi, c, load_digits(&x.q256, at));
                    *lo = _mm512_dpwssd_epi32(*lo, c, load_digits(&x.lo256, at));
                }
            }
        }
        let v = _mm512_add_ps(join(sums[0].0, sums[0].1), join(sums[1].0, sums[1].1));
        acc = _mm512_fmadd_ps(v, _mm512_set1_ps(d * x.d256[sb]), acc);
    }
    _mm512_reduce_add_ps(acc)
}
