//! Q4_K, Q5_K and Q6_K at 256 bits against the input's digits with one scale per 256 values
//! ([`QuantRow::q256`]), the scheme of `vnni.rs` at half its width: each sub-block's integer
//! scale folded into its codes (`mullo`; at most 31·63 for Q4_K/Q5_K and 32·128 for Q6_K,
//! inside i16), the whole super-block summed against each digit in i32 lanes, so that a
//! super-block takes two conversions to float instead of two per 32 values, and no float
//! scale per sub-block. The lanes fit: Q4_K/Q5_K at most 32 products of 1953 · 32767 ≈ 2.05e9
//! per lane; Q6_K (4096 · 32767 per product) one pair of accumulators per half of the
//! super-block, 16 products a lane, ≈ 2.147e9 < 2³¹. Exact like the other kernels: only the
//! order of the float additions differs.
//!
//! The multiply-add is a parameter ([`Madd`]): `madd` and an add on AVX2.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::super::{QuantRow, SUPER};
use super::kquants::{k_codes, q6_codes};
use super::{LO, f16_at, hsum};

/// `acc + Σ pairs of c·x` in i32 lanes: the one step the kernels below repeat.
pub(in super::super) trait Madd {
    /// # Safety
    /// The CPU has the implementation's features.
    unsafe fn madd(acc: __m256i, c: __m256i, x: __m256i) -> __m256i;
}

/// AVX2: `vpmaddwd`, then `vpaddd`.
pub(in super::super) struct Avx2;

impl Madd for Avx2 {
    #[inline(always)]
    unsafe fn madd(acc: __m256i, c: __m256i, x: __m256i) -> __m256i {
        // SAFETY: the caller's contract (AVX2).
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(c, x)) }
    }
}

/// 16 i16 of `digits` from `at`.
#[inline(always)]
unsafe fn digits16(digits: &[i16], at: usize) -> __m256i {
    assert!(at + 16 <= digits.len());
    // SAFETY: checked just above; AVX is the caller's.
    unsafe { _mm256_loadu_si256(digits.as_ptr().add(at) as *const __m256i) }
}

/// `hi + lo · 2⁻¹⁵` of two integer sums, in f32 lanes.
#[inline(always)]
unsafe fn join(hi: __m256i, lo: __m256i) -> __m256 {
    // SAFETY: the caller's contract (AVX2, FMA).
    unsafe {
        _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(lo),
            _mm256_set1_ps(LO),
            _mm256_cvtepi32_ps(hi),
        )
    }
}

/// 32 i16 codes (two halves) against 32 values of both digits from `at`, into `hi` and `lo`.
#[inline(always)]
unsafe fn add32<M: Madd>(c: [__m256i; 2], x: &QuantRow, at: usize, sums: &mut [__m256i; 2]) {
    // SAFETY: the caller's contract; the loads are bounds-checked.
    unsafe {
        for (h, c) in c.into_iter().enumerate() {
            sums[0] = M::madd(sums[0], c, digits16(&x.q256, at + 16 * h));
            sums[1] = M::madd(sums[1], c, digits16(&x.lo256, at + 16 * h));
        }
    }
}

/// Q4_K and Q5_K (`fifth`: the 32 high-bit bytes follow the scales).
///
/// # Safety
/// The CPU has AVX2, FMA, F16C and `M`'s features; `x` holds the per-256 form.
#[inline(always)]
pub(in super::super) unsafe fn k_blocks<M: Madd>(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    fifth: bool,
) -> f32 {
    // SAFETY: the caller's contract; every load is bounds-checked.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut mins = _mm256_setzero_ps();
        for (sb, blk) in w.chunks_exact(bytes).enumerate() {
            let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
            let (scales, mins8) = scales_mins(&blk[4..16]);
            // The eight scales as i16 in both halves; sub-block j's broadcast by a shuffle.
            let scales =
                _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(scales as i64)));
            let mut sums = [_mm256_setzero_si256(); 2];
            for n in 0..4 {
                for (half, codes) in k_codes(blk, fifth, n).into_iter().enumerate() {
                    let j = 2 * n + half;
                    let s = _mm256_shuffle_epi8(scales, load_ctrl(&WORD_OF[j]));
                    let c = [
                        _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(codes)), s),
                        _mm256_mullo_epi16(
                            _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(codes)),
                            s,
                        ),
                    ];
                    add32::<M>(c, x, sb * SUPER + 32 * j, &mut sums);
                }
            }
            let s = _mm256_set1_ps(d * x.d256[sb]);
            acc = _mm256_fmadd_ps(join(sums[0], sums[1]), s, acc);
            // The mins times their sub-blocks' input sums, eight at once.
            let m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins8 as i64)));
            assert!(x.sum32.len() >= sb * 8 + 8);
            let sum32 = _mm256_loadu_ps(x.sum32.as_ptr().add(sb * 8));
            mins = _mm256_fmadd_ps(
                _mm256_mul_ps(m, sum32),
                _mm256_set1_ps(dmin * x.d256[sb]),
                mins,
            );
        }
        hsum(acc) - hsum(mins)
    }
}

/// The eight 6-bit scales and eight 6-bit mins packed in a Q4_K/Q5_K super-block's 12 scale
/// bytes, one byte each (sub-block 0 lowest), unpacked as whole words: the same values as
/// `scalar_k::scale_min` gives one at a time.
#[inline(always)]
fn scales_mins(s: &[u8]) -> (u64, u64) {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let (low6, low4, top2) = (0x3F3F_3F3Fu32, 0x0F0F_0F0Fu32, 0x0303_0303u32);
    let scales_hi = (w2 & low4) | (((w0 >> 6) & top2) << 4);
    let mins_hi = ((w2 >> 4) & low4) | (((w1 >> 6) & top2) << 4);
    (
        u64::from(w0 & low6) | u64::from(scales_hi) << 32,
        u64::from(w1 & low6) | u64::from(mins_hi) << 32,
    )
}

/// Shuffle controls that put 16-bit word `j` of each 128-bit half into every word of it.
const WORD_OF: [[i8; 32]; 8] = {
    let mut c = [[0i8; 32]; 8];
    let mut j = 0;
    while j < 8 {
        let mut b = 0;
        while b < 32 {
            c[j][b] = (2 * j + b % 2) as i8;
            b += 1;
        }
        j += 1;
    }
    c
};

/// A 32-byte shuffle control.
#[inline(always)]
unsafe fn load_ctrl(c: &[i8; 32]) -> __m256i {
    // SAFETY: 32 bytes read from a 32-byte array; AVX is the caller's.
    unsafe { _mm256_loadu_si256(c.as_ptr() as *const __m256i) }
}

/// Q6_K.
///
/// # Safety
/// As [`k_blocks`].
#[inline(always)]
pub(in super::super) unsafe fn q6_k_with<M: Madd>(w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: the caller's contract; every load is bounds-checked.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let m32 = _mm256_set1_epi8(32);
        for (sb, blk) in w.chunks_exact(210).enumerate() {
            let d = f16_at(blk, 208);
            let mut v = _mm256_setzero_ps();
            for h in 0..2 {
                // This half's eight i8 scales (one per 16 values) as i16 in both 128-bit halves;
                // each broadcast by a shuffle.
                let scales = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64(
                    blk[192 + 8 * h..200 + 8 * h].as_ptr() as *const __m128i,
                )));
                // One pair of accumulators per half: four groups of 32.
                let mut sums = [_mm256_setzero_si256(); 2];
                for (k, c) in q6_codes(blk, h).into_iter().enumerate() {
                    // Signed values −32..31, each times its 16 values' i8 scale.
                    let c = _mm256_sub_epi8(c, m32);
                    let scale = |i: usize| _mm256_shuffle_epi8(scales, load_ctrl(&WORD_OF[i]));
                    let c = [
                        _mm256_mullo_epi16(
                            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(c)),
                            scale(2 * k),
                        ),
                        _mm256_mullo_epi16(
                            _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(c)),
                            scale(2 * k + 1),
                        ),
                    ];
                    add32::<M>(c, x, sb * SUPER + (h * 4 + k) * 32, &mut sums);
                }
                v = _mm256_add_ps(v, join(sums[0], sums[1]));
            }
            acc = _mm256_fmadd_ps(v, _mm256_set1_ps(d * x.d256[sb]), acc);
        }
        hsum(acc)
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { k_blocks::<Avx2>(w, 144, x, false) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { k_blocks::<Avx2>(w, 176, x, true) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { q6_k_with::<Avx2>(w, x) }
}
