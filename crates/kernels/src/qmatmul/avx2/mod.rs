//! AVX2 + FMA kernels: for the super-block types the same integer sums as `scalar.rs`, 16
//! products per `madd` (codes widened to i16 against the i16 input), one float scale per block
//! accumulated in eight f32 lanes; for the 32-value types the codes converted to f32 against the
//! f32 input (`blocks.rs`), except Q5_0, in integers against the input's digits in lane order
//! (`lanes.rs`); float weights converted eight at a time (F16C for f16, a shift for
//! bf16) against the f32 input. Results differ from the scalar ones in the order of the float
//! additions, and for the 32-value types by the scalar kernels' input digits.
//! This file holds the dispatch, the helpers and the floats; `blocks.rs` the 32-value blocks,
//! `kquants.rs` the super-blocks.

#![allow(unsafe_code)]

mod blocks;
mod lanes;

pub(super) use blocks::dot_rows;
pub(super) mod kquants;
pub(super) mod ksum;

use std::arch::x86_64::*;

use super::{LO, QuantRow};
use crate::quant::{GgmlType, IQ4_VALUES};

/// Whether this CPU runs these kernels (and `GEMMA_CHAT_SIMD` allows them).
pub(super) fn available() -> bool {
    super::simd::level() >= super::simd::Simd::Avx2
}

pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: `available()` was checked by the caller; every kernel reads whole blocks of `w`
    // (its length is a whole number of blocks, checked in `QMatrix::new`) and the matching
    // values of `x`, whose quantized part is padded to whole blocks of 32.
    unsafe {
        match ty {
            GgmlType::F32 => f32s(w, x),
            GgmlType::F16 => f16s(w, x),
            GgmlType::BF16 => bf16s(w, x),
            GgmlType::Q4_0 => blocks::q4_0(w, x),
            GgmlType::Q4_1 => blocks::q4_1(w, x),
            GgmlType::Q5_0 => lanes::q5_0(w, x),
            GgmlType::Q5_1 => blocks::q5_1(w, x),
            GgmlType::Q8_0 => blocks::q8_0(w, x),
            GgmlType::IQ4_NL => blocks::iq4_nl(w, x),
            GgmlType::Q2_K => kquants::q2_k(w, x),
            GgmlType::Q3_K => kquants::q3_k(w, x),
            GgmlType::Q4_K => ksum::q4_k(w, x),
            GgmlType::Q5_K => ksum::q5_k(w, x),
            GgmlType::Q6_K => ksum::q6_k(w, x),
            GgmlType::IQ4_XS => kquants::iq4_xs(w, x),
        }
    }
}

/// The f16 at `b[at..at + 2]`, converted by the CPU (the `half` crate asks for F16C per call).
/// Only lane 0 is used, so the compiler turns the `set1` into an insert (`vpinsrw`) into a
/// register it picks, here often an accumulator's, chaining the scale to that accumulator's
/// last FMA: harmless where a block is 256 values, not where it is 32 ([`f16_lanes`] there).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(bits as i16)))
}

/// The f16 at `b[at..at + 2]` in all eight lanes, converted as a vector: every lane is used,
/// so the compiler keeps the broadcast, where [`f16_at`]'s one lane let it become an insert
/// into an accumulator's register (the Q8_0 kernel's blocks chained through it: 13 cycles a
/// block on the AMD cores this was measured on).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_lanes(b: &[u8], at: usize) -> __m256 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Each of `sums` added across its lanes into `out`, in order (no allocation: this runs for
/// every group of inputs of every row).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsums<const N: usize>(sums: [__m256; N], out: &mut [f32]) {
    for (o, v) in out.iter_mut().zip(sums) {
        *o = hsum(v);
    }
}

/// 16 i16 of `digits` (the input's `q` or `lo`) starting at `at`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load16(digits: &[i16], at: usize) -> __m256i {
    assert!(at + 16 <= digits.len());
    // SAFETY: checked just above.
    unsafe { _mm256_loadu_si256(digits.as_ptr().add(at) as *const __m256i) }
}

/// `Σ c·x` in eight f32 lanes for 16 signed byte values: the integer sums against both digits
/// of the input, joined as `hi + lo · 2⁻¹⁵`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot16_i8(v: __m128i, x: &QuantRow, at: usize) -> __m256 {
    unsafe {
        let c = _mm256_cvtepi8_epi16(v);
        let hi = _mm256_madd_epi16(c, load16(&x.q, at));
        let lo = _mm256_madd_epi16(c, load16(&x.lo, at));
        _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(lo),
            _mm256_set1_ps(LO),
            _mm256_cvtepi32_ps(hi),
        )
    }
}

/// `Σ c·x` in eight f32 lanes for 32 signed byte values: both halves' integer sums added in
/// i32 before the conversion (each lane at most 4 · 128 · 32767 < 2³¹), so a block costs two
/// conversions instead of four.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32_i8(v: __m256i, x: &QuantRow, at: usize) -> __m256 {
    unsafe {
        let c0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
        let c1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v));
        let sum = |d: &[i16]| {
            _mm256_add_epi32(
                _mm256_madd_epi16(c0, load16(d, at)),
                _mm256_madd_epi16(c1, load16(d, at + 16)),
            )
        };
        _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(sum(&x.lo)),
            _mm256_set1_ps(LO),
            _mm256_cvtepi32_ps(sum(&x.q)),
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn fma_i32(p: __m256, scale: f32, acc: __m256) -> __m256 {
    _mm256_fmadd_ps(p, _mm256_set1_ps(scale), acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load32(p: &[u8]) -> __m256i {
    assert!(p.len() >= 32);
    // SAFETY: checked just above.
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load16_u8(p: &[u8]) -> __m128i {
    assert!(p.len() >= 16);
    // SAFETY: checked just above.
    unsafe { _mm_loadu_si128(p.as_ptr() as *const __m128i) }
}

/// The 32 4-bit codes of 16 bytes, low nibbles in the low lane.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(qs: &[u8]) -> __m256i {
    let m4 = _mm_set1_epi8(0x0F);
    let q = unsafe { load16_u8(qs) };
    let lo = _mm_and_si128(q, m4);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m4);
    _mm256_set_m128i(hi, lo)
}

/// IQ4_NL's table looked up for 32 4-bit codes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn iq4_lookup(codes: __m256i) -> __m256i {
    // SAFETY: 16 bytes read from a 16-byte array.
    let table = unsafe { _mm_loadu_si128(IQ4_VALUES.as_ptr() as *const __m128i) };
    _mm256_shuffle_epi8(_mm256_set_m128i(table, table), codes)
}

/// `Σ w·x` for float weights of `size` bytes, eight at a time through `load8` (which turns the
/// eight weights at a byte slice's start into f32 lanes), the tail one by one.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn floats(
    w: &[u8],
    size: usize,
    x: &QuantRow,
    load8: impl Fn(&[u8]) -> __m256,
    one: impl Fn(&[u8]) -> f32,
) -> f32 {
    let n = w.len() / size;
    assert!(x.x.len() >= n);
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n <= x.x.len().
        unsafe {
            let x0 = _mm256_loadu_ps(x.x.as_ptr().add(i));
            let x1 = _mm256_loadu_ps(x.x.as_ptr().add(i + 8));
            a0 = _mm256_fmadd_ps(load8(&w[i * size..]), x0, a0);
            a1 = _mm256_fmadd_ps(load8(&w[(i + 8) * size..]), x1, a1);
        }
        i += 16;
    }
    let mut tail = 0f32;
    for j in i..n {
        tail += one(&w[j * size..]) * x.x[j];
    }
    hsum(_mm256_add_ps(a0, a1)) + tail
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32s(w: &[u8], x: &QuantRow) -> f32 {
    unsafe {
        floats(
            w,
            4,
            x,
            |b| {
                assert!(b.len() >= 32);
                _mm256_loadu_ps(b.as_ptr() as *const f32)
            },
            |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16s(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { floats(w, 2, x, |b| _mm256_cvtph_ps(load16_u8(b)), |b| f16_at(b, 0)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16s(w: &[u8], x: &QuantRow) -> f32 {
    unsafe {
        floats(
            w,
            2,
            x,
            |b| {
                let wide = _mm256_cvtepu16_epi32(load16_u8(b));
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
            },
            |b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        )
    }
}
