//! AVX2 + FMA kernels: the same integer sums as `scalar.rs`, 16 products per `madd` (codes widened
//! to i16 against the i16 input), one float scale per block accumulated in eight f32 lanes.
//! Results differ from the scalar ones only in the order of the float additions.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::scalar::scale_min;
use super::{BLOCK, QuantRow};
use crate::loader::quant::GgmlType;

/// Whether this CPU runs these kernels (checked once; std caches the answer).
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// The f16 at `b[at..at + 2]`, converted by the CPU (the `half` crate asks for F16C per call).
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: `available()` was checked by the caller; every kernel reads whole blocks of `w`
    // (the length is a multiple of the block size, checked in `QMatrix::new`) and the matching
    // 32 or 16 values of `x`, whose length is the matrix's column count.
    unsafe {
        match ty {
            GgmlType::Q8_0 => q8_0(w, x),
            GgmlType::Q5_0 => q5_0(w, x),
            GgmlType::Q4_K => q4_k(w, x),
            GgmlType::Q6_K => q6_k(w, x),
            other => unreachable!("QMatrix::new refuses {other:?}"),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// 16 i16 of `x` starting at `at`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load16(x: &QuantRow, at: usize) -> __m256i {
    debug_assert!(at + 16 <= x.q.len());
    // SAFETY: the caller keeps `at + 16` within `x.q`.
    unsafe { _mm256_loadu_si256(x.q.as_ptr().add(at) as *const __m256i) }
}

/// `Σ c·x` in eight i32 lanes for 16 signed byte values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot16_i8(v: __m128i, x: &QuantRow, at: usize) -> __m256i {
    unsafe { _mm256_madd_epi16(_mm256_cvtepi8_epi16(v), load16(x, at)) }
}

/// `Σ c·x` in eight i32 lanes for 32 signed byte values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32_i8(v: __m256i, x: &QuantRow, at: usize) -> __m256i {
    unsafe {
        _mm256_add_epi32(
            dot16_i8(_mm256_castsi256_si128(v), x, at),
            dot16_i8(_mm256_extracti128_si256::<1>(v), x, at + 16),
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn fma_i32(p: __m256i, scale: f32, acc: __m256) -> __m256 {
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale), acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load32(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0(w: &[u8], x: &QuantRow) -> f32 {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block(blk: &[u8], x: &QuantRow, b: usize, acc: __m256) -> __m256 {
        unsafe {
            let c = load32(&blk[2..34]);
            fma_i32(dot32_i8(c, x, b * BLOCK), f16_at(blk, 0) * x.d[b], acc)
        }
    }
    // Two blocks a step into two accumulators, so that neither waits on the other's FMA.
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut pairs = w.chunks_exact(68);
    let mut b = 0;
    for pair in pairs.by_ref() {
        unsafe {
            a0 = block(&pair[..34], x, b, a0);
            a1 = block(&pair[34..], x, b + 1, a1);
        }
        b += 2;
    }
    if !pairs.remainder().is_empty() {
        a0 = unsafe { block(pairs.remainder(), x, b, a0) };
    }
    hsum(_mm256_add_ps(a0, a1))
}

/// 0x10 in byte j where bit j of `qh` is set.
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    // Byte j takes byte j / 8 of qh, then tests bit j % 8.
    let spread = _mm256_shuffle_epi8(
        v,
        _mm256_set_epi64x(
            0x0303030303030303,
            0x0202020202020202,
            0x0101010101010101,
            0,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let m4 = _mm_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    for (b, blk) in w.chunks_exact(22).enumerate() {
        unsafe {
            let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
            let qs = _mm_loadu_si128(blk[6..22].as_ptr() as *const __m128i);
            let lo = _mm_and_si128(qs, m4);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), m4);
            let codes = _mm256_or_si256(_mm256_set_m128i(hi, lo), fifth_bits(qh));
            // Signed values −16..15: no offset to correct afterwards.
            let v = _mm256_sub_epi8(codes, sixteen);
            acc = fma_i32(dot32_i8(v, x, b * BLOCK), f16_at(blk, 0) * x.d[b], acc);
        }
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0f32;
    let m4 = _mm256_set1_epi8(0x0F);
    for (sb, blk) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let scales = &blk[4..16];
        for n in 0..4 {
            unsafe {
                let q = load32(&blk[16 + 32 * n..16 + 32 * n + 32]);
                let halves = [
                    _mm256_and_si256(q, m4),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                ];
                for (half, codes) in halves.into_iter().enumerate() {
                    let j = 2 * n + half;
                    let b = sb * 8 + j;
                    let (sc, m) = scale_min(j, scales);
                    // Codes 0..15 read the same as signed bytes.
                    acc = fma_i32(dot32_i8(codes, x, b * BLOCK), d * sc as f32 * x.d[b], acc);
                    let sum = x.sum16[2 * b] + x.sum16[2 * b + 1];
                    mins += x.d[b] * dmin * m as f32 * sum as f32;
                }
            }
        }
    }
    hsum(acc) - mins
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let m32 = _mm256_set1_epi8(32);
    for (sb, blk) in w.chunks_exact(210).enumerate() {
        let d = f16_at(blk, 208);
        for h in 0..2 {
            unsafe {
                let ql0 = load32(&blk[h * 64..]);
                let ql1 = load32(&blk[h * 64 + 32..]);
                let qh = load32(&blk[128 + h * 32..]);
                let codes = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                        _mm256_and_si256(qh, m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                    ),
                ];
                for (k, c) in codes.into_iter().enumerate() {
                    // Signed values −32..31: no offset to correct afterwards.
                    let c = _mm256_sub_epi8(c, m32);
                    let b = sb * 8 + h * 4 + k;
                    let at = b * BLOCK;
                    let sc = &blk[192 + h * 8 + 2 * k..];
                    let (s0, s1) = (
                        d * sc[0] as i8 as f32 * x.d[b],
                        d * sc[1] as i8 as f32 * x.d[b],
                    );
                    acc = fma_i32(dot16_i8(_mm256_castsi256_si128(c), x, at), s0, acc);
                    acc = fma_i32(
                        dot16_i8(_mm256_extracti128_si256::<1>(c), x, at + 16),
                        s1,
                        acc,
                    );
                }
            }
        }
    }
    hsum(acc)
}
