//! AVX-512 kernels (F, BW, VL): one whole block of 32 codes per 512-bit `madd` against each
//! digit of the input, so a block costs half the instructions of the AVX2 path; the fifth bits
//! of Q5_0/Q5_1 come straight from a mask register; the super-block types share their bodies
//! with AVX2 (`avx2/kquants.rs`) through a sixteen-lane [`Acc`]. The same integer sums as
//! `scalar.rs`; results differ only in the order of the float additions. The float types keep
//! the AVX2 kernels (they stream the weights; the width does not matter).

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::avx2::kquants::{self, Acc};
use super::avx2::{self, f16_at, iq4_lookup, load32, nibbles};
use super::{BLOCK, LO, QuantRow};
use crate::quant::GgmlType;

/// Whether this CPU runs these kernels (and `GEMMA_CHAT_SIMD` allows them).
pub(super) fn available() -> bool {
    super::simd::level() >= super::simd::Simd::Avx512
}

pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: `available()` was checked by the caller; every kernel reads whole blocks of `w`
    // (its length is a whole number of blocks, checked in `QMatrix::new`) and the matching
    // values of `x`, whose digits are padded to whole blocks of 32.
    unsafe {
        match ty {
            GgmlType::Q4_0 => q4_0(w, x),
            GgmlType::Q4_1 => q4_1(w, x),
            GgmlType::Q5_0 => q5_0(w, x),
            GgmlType::Q5_1 => q5_1(w, x),
            GgmlType::Q8_0 => q8_0(w, x),
            GgmlType::IQ4_NL => iq4_nl(w, x),
            GgmlType::Q2_K => q2_k(w, x),
            GgmlType::Q3_K => q3_k(w, x),
            GgmlType::Q4_K => q4_k(w, x),
            GgmlType::Q5_K => q5_k(w, x),
            GgmlType::Q6_K => q6_k(w, x),
            GgmlType::IQ4_XS => iq4_xs(w, x),
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => avx2::dot(ty, w, x),
        }
    }
}

/// 32 i16 of `digits` from `at`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn load_digits(digits: &[i16], at: usize) -> __m512i {
    assert!(at + 32 <= digits.len());
    // SAFETY: checked just above.
    unsafe { _mm512_loadu_si512(digits.as_ptr().add(at) as *const __m512i) }
}

/// `Σ c·x` over one block of 32 signed byte codes in sixteen f32 lanes: the integer sums
/// against both digits of the input, joined as `hi + lo · 2⁻¹⁵`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn block32(codes: __m256i, x: &QuantRow, at: usize) -> __m512 {
    unsafe { block32_wide(_mm512_cvtepi8_epi16(codes), x, at) }
}

/// [`block32`] of codes already widened to i16.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn block32_wide(c: __m512i, x: &QuantRow, at: usize) -> __m512 {
    unsafe {
        let hi = _mm512_madd_epi16(c, load_digits(&x.q, at));
        let lo = _mm512_madd_epi16(c, load_digits(&x.lo, at));
        _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(lo),
            _mm512_set1_ps(LO),
            _mm512_cvtepi32_ps(hi),
        )
    }
}

/// `f16 at blk[at] · xd` in every lane. Converted as a whole vector: a scalar conversion
/// compiles to an insert that merges into whatever register the compiler picks, an
/// accumulator included, which chains each block to the previous block's FMA.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn scale16(blk: &[u8], at: usize, xd: f32) -> __m512 {
    let bits = u16::from_le_bytes([blk[at], blk[at + 1]]);
    _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16)),
        _mm512_set1_ps(xd),
    )
}

/// The mask of the 32 fifth bits of a Q5 block.
fn fifth_mask(qh: &[u8]) -> __mmask32 {
    u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]])
}

/// Blocks of `bytes` with an f16 scale first whose `codes` are the signed values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn scaled_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    codes: impl Fn(&[u8]) -> __m256i,
) -> f32 {
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut pairs = w.chunks_exact(2 * bytes);
    let mut b = 0;
    for two in pairs.by_ref() {
        let (p, q) = two.split_at(bytes);
        unsafe {
            let s0 = scale16(p, 0, x.d[b]);
            let s1 = scale16(q, 0, x.d[b + 1]);
            a0 = _mm512_fmadd_ps(block32(codes(p), x, b * BLOCK), s0, a0);
            a1 = _mm512_fmadd_ps(block32(codes(q), x, (b + 1) * BLOCK), s1, a1);
        }
        b += 2;
    }
    let p = pairs.remainder();
    if !p.is_empty() {
        let s0 = scale16(p, 0, x.d[b]);
        a0 = unsafe { _mm512_fmadd_ps(block32(codes(p), x, b * BLOCK), s0, a0) };
    }
    _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
}

/// Blocks with an f16 scale and min first, unsigned `codes`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn min_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    codes: impl Fn(&[u8]) -> __m256i,
) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut mins = 0f32;
    for (b, blk) in w.chunks_exact(bytes).enumerate() {
        let s = scale16(blk, 0, x.d[b]);
        acc = unsafe { _mm512_fmadd_ps(block32(codes(blk), x, b * BLOCK), s, acc) };
        let sum = x.sum16[2 * b] + x.sum16[2 * b + 1];
        mins += x.d[b] * f16_at(blk, 2) * sum;
    }
    _mm512_reduce_add_ps(acc) + mins
}

/// The inputs one pass of [`dot_rows`] takes: each weight block is decoded once for them.
const ROWS: usize = 4;

/// `w · x` for each of `xs` into `out` (one value each), for the types whose blocks are one f16
/// scale and signed codes (Q4_0, Q5_0, Q8_0, IQ4_NL): each block's codes are decoded once per
/// [`ROWS`] inputs instead of once per input, and every input's sums are taken in the order
/// [`dot`]'s kernel takes them, so the results are the same bits. `false` (nothing written) for
/// the other types.
pub(super) fn dot_rows(ty: GgmlType, w: &[u8], xs: &[QuantRow], out: &mut [f32]) -> bool {
    assert_eq!(xs.len(), out.len(), "one output per input");
    let (eight, sixteen) = (8, 16);
    // SAFETY: as in [`dot`].
    unsafe {
        match ty {
            GgmlType::Q4_0 => rows(w, 18, xs, out, |b| {
                _mm256_sub_epi8(nibbles(&b[2..18]), _mm256_set1_epi8(eight))
            }),
            GgmlType::Q5_0 => rows(w, 22, xs, out, |b| {
                let n = nibbles(&b[6..22]);
                _mm256_mask_sub_epi8(n, !fifth_mask(&b[2..6]), n, _mm256_set1_epi8(sixteen))
            }),
            GgmlType::Q8_0 => rows(w, 34, xs, out, |b| load32(&b[2..34])),
            GgmlType::IQ4_NL => rows(w, 18, xs, out, |b| iq4_lookup(nibbles(&b[2..18]))),
            _ => return false,
        }
    }
    true
}

/// [`dot_rows`] over groups of [`ROWS`] inputs, then the rest one group of fewer.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn rows(
    w: &[u8],
    bytes: usize,
    xs: &[QuantRow],
    out: &mut [f32],
    codes: impl Fn(&[u8]) -> __m256i + Copy,
) {
    for (g, o) in xs.chunks(ROWS).zip(out.chunks_mut(ROWS)) {
        // SAFETY: the caller's contract.
        unsafe {
            match g.len() {
                4 => scaled_rows::<4>(w, bytes, g, o, codes),
                3 => scaled_rows::<3>(w, bytes, g, o, codes),
                2 => scaled_rows::<2>(w, bytes, g, o, codes),
                _ => scaled_rows::<1>(w, bytes, g, o, codes),
            }
        }
    }
}

/// [`scaled_blocks`] for `N` inputs at once: the same two accumulators per input (even and odd
/// blocks), the same operations per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn scaled_rows<const N: usize>(
    w: &[u8],
    bytes: usize,
    xs: &[QuantRow],
    out: &mut [f32],
    codes: impl Fn(&[u8]) -> __m256i,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; N];
    for (b, blk) in w.chunks_exact(bytes).enumerate() {
        let c = _mm512_cvtepi8_epi16(codes(blk));
        let bits = u16::from_le_bytes([blk[0], blk[1]]);
        let d = _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16));
        for r in 0..N {
            let x = &xs[r];
            let s = _mm512_mul_ps(d, _mm512_set1_ps(x.d[b]));
            // SAFETY: the caller's contract.
            let p = unsafe { block32_wide(c, x, b * BLOCK) };
            acc[r][b % 2] = _mm512_fmadd_ps(p, s, acc[r][b % 2]);
        }
    }
    for (o, [a0, a1]) in out.iter_mut().zip(acc) {
        *o = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q4_0(w: &[u8], x: &QuantRow) -> f32 {
    let eight = _mm256_set1_epi8(8);
    unsafe { scaled_blocks(w, 18, x, |b| _mm256_sub_epi8(nibbles(&b[2..18]), eight)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q4_1(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { min_blocks(w, 20, x, |b| nibbles(&b[4..20])) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q5_0(w: &[u8], x: &QuantRow) -> f32 {
    let sixteen = _mm256_set1_epi8(16);
    unsafe {
        scaled_blocks(w, 22, x, |b| {
            // code − 16 = nibble − 16 where the fifth bit is clear.
            let n = nibbles(&b[6..22]);
            _mm256_mask_sub_epi8(n, !fifth_mask(&b[2..6]), n, sixteen)
        })
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q5_1(w: &[u8], x: &QuantRow) -> f32 {
    let sixteen = _mm256_set1_epi8(16);
    unsafe {
        min_blocks(w, 24, x, |b| {
            let n = nibbles(&b[8..24]);
            _mm256_mask_add_epi8(n, fifth_mask(&b[4..8]), n, sixteen)
        })
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q8_0(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { scaled_blocks(w, 34, x, |b| load32(&b[2..34])) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn iq4_nl(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { scaled_blocks(w, 18, x, |b| iq4_lookup(nibbles(&b[2..18]))) }
}

/// Sixteen f32 lanes: a whole 32-value block per `madd` pair.
struct Lanes16(__m512);

impl Acc for Lanes16 {
    #[inline(always)]
    fn new() -> Self {
        // SAFETY: only built inside the AVX-512 wrappers below.
        Self(unsafe { _mm512_setzero_ps() })
    }
    #[inline(always)]
    unsafe fn add32(&mut self, codes: __m256i, x: &QuantRow, at: usize, scale: f32) {
        // SAFETY: the caller's contract.
        unsafe { self.0 = _mm512_fmadd_ps(block32(codes, x, at), _mm512_set1_ps(scale), self.0) }
    }
    #[inline(always)]
    unsafe fn add16x2(&mut self, codes: __m256i, x: &QuantRow, at: usize, s0: f32, s1: f32) {
        // Lanes 0..8 hold the first 16 values' pairs, lanes 8..16 the second's.
        // SAFETY: the caller's contract.
        unsafe {
            let s = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
            self.0 = _mm512_fmadd_ps(block32(codes, x, at), s, self.0);
        }
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        // SAFETY: the caller's contract.
        unsafe { _mm512_reduce_add_ps(self.0) }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q2_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { kquants::q2_k_with::<Lanes16>(w, x) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q3_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { kquants::q3_k_with::<Lanes16>(w, x) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q4_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { kquants::k_blocks::<Lanes16>(w, 144, x, false) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q5_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { kquants::k_blocks::<Lanes16>(w, 176, x, true) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { kquants::q6_k_with::<Lanes16>(w, x) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn iq4_xs(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { kquants::iq4_xs_with::<Lanes16>(w, x) }
}
