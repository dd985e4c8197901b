//! The AVX2 kernel of Q5_0 in integers: each block's codes widened to i16 by unpacking (no
//! widening instruction), against the input's two i16 digits held in lane order
//! ([`QuantRow::q_lanes`], which every product with a Q5_0 matrix at this level builds), two
//! `madd`s a digit. On the AMD cores this was measured on (Zen 3, AVX2 only) a Q5_0 row took 16%
//! less time than with the codes converted to f32 (the kernel of the other 32-value types,
//! `blocks.rs`). An input without those digits is refused (a panic), never read past.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::super::{BLOCK, LO, QuantRow};
use super::blocks::{ROWS, fifth_set};
use super::{f16_lanes, hsum, hsums, load16_u8};

/// Q5_0's 32 codes (−16..15) as two vectors of 16 i16 in lane order (values 0–7 and 16–23,
/// then 8–15 and 24–31: [`super::super::LANE_ORDER`]): the nibbles (codes 0–15 in the low
/// half, 16–31 in the high one) with the fifth bits or-ed in, widened by unpacking with zero,
/// less 16. No widening instruction: `vpmovzx`/`vpmovsx` from a register cost more than a
/// cycle each on the AMD cores this was measured on (Zen 3), unpacking half a cycle.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_words(b: &[u8]) -> (__m256i, __m256i) {
    assert!(b.len() >= 22);
    let qs = unsafe { load16_u8(&b[6..22]) };
    let nibbles = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16::<4>(qs), qs),
        _mm256_set1_epi8(0x0F),
    );
    let fifth = _mm256_and_si256(fifth_set(&b[2..6]), _mm256_set1_epi8(16));
    let codes = _mm256_or_si256(nibbles, fifth);
    let (zero, sixteen) = (_mm256_setzero_si256(), _mm256_set1_epi16(16));
    (
        _mm256_sub_epi16(_mm256_unpacklo_epi8(codes, zero), sixteen),
        _mm256_sub_epi16(_mm256_unpackhi_epi8(codes, zero), sixteen),
    )
}

/// `Σ c·x` in eight f32 lanes for one block's words against block `b` of an input's digits in
/// lane order: both digits' integer sums (each lane at most 4 · 16 · 32767 < 2³¹), joined as
/// `hi + lo · 2⁻¹⁵`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn words_dot(c: (__m256i, __m256i), x: &QuantRow, b: usize) -> __m256 {
    let at = b * BLOCK;
    let sum = |d: &[i16]| {
        assert!(at + BLOCK <= d.len());
        // SAFETY: values at..at + 32 lie in `d` (checked just above).
        let v = |i: usize| unsafe { _mm256_loadu_si256(d.as_ptr().add(at + i) as *const __m256i) };
        _mm256_add_epi32(_mm256_madd_epi16(c.0, v(0)), _mm256_madd_epi16(c.1, v(16)))
    };
    _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(sum(&x.lo_lanes)),
        _mm256_set1_ps(LO),
        _mm256_cvtepi32_ps(sum(&x.q_lanes)),
    )
}

/// Q5_0 rows against `N` inputs in integers: each block's codes decoded once
/// ([`q5_0_words`]), then per input two digits' `madd`s and the block's scale times the
/// input's; each input's sums the same bits whatever `N`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_words_rows<const N: usize>(w: &[u8], xs: [&QuantRow; N]) -> [__m256; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    for (b, block) in w.chunks_exact(22).enumerate() {
        let c = unsafe { q5_0_words(block) };
        let d = f16_lanes(block, 0);
        for r in 0..N {
            let s = unsafe { words_dot(c, xs[r], b) };
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xs[r].d[b])), s, acc[r]);
        }
    }
    acc
}

/// A Q5_0 row against one input.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0(w: &[u8], x: &QuantRow) -> f32 {
    let [v] = unsafe { q5_0_words_rows::<1>(w, [x]) };
    hsum(v)
}

/// [`q5_0_words_rows`] over groups of [`ROWS`] inputs, then the rest in one group of fewer.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0_rows(w: &[u8], xs: &[QuantRow], out: &mut [f32]) {
    for (g, o) in xs.chunks(ROWS).zip(out.chunks_mut(ROWS)) {
        // SAFETY: the caller's contract; the digits' reads are bounds-checked (`words_dot`).
        unsafe {
            match g {
                [a, b, c, d] => hsums(q5_0_words_rows(w, [a, b, c, d]), o),
                [a, b, c] => hsums(q5_0_words_rows(w, [a, b, c]), o),
                [a, b] => hsums(q5_0_words_rows(w, [a, b]), o),
                _ => hsums(q5_0_words_rows(w, [&g[0]]), o),
            }
        }
    }
}
