//! Kernels of the 256-value super-block types (Q2_K..Q6_K, IQ4_XS): codes unpacked 32 bytes
//! at a time (AVX2), then dotted with the input and scaled per sub-block by an [`Acc`]: eight
//! f32 lanes and a `madd` per 16 values here (Q2_K, Q3_K, IQ4_XS; Q4_K..Q6_K sum whole
//! super-blocks in integers, `ksum.rs`), sixteen lanes and a `madd` per 32 values with AVX-512
//! (`avx512.rs`), every type. One body per type serves both.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::super::scalar_k::scale_min;
use super::super::{BLOCK, QuantRow};
use super::{dot16_i8, dot32_i8, f16_at, fma_i32, hsum, iq4_lookup, load32, nibbles};
use crate::quant::{iq4_xs_scale, q3_k_scales};

/// Bytes where bit `bit` of `v`'s bytes is set: 0xFF, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) fn bit_set(v: __m256i, bit: u32) -> __m256i {
    let m = _mm256_set1_epi8((1u8 << bit) as i8);
    _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m)
}

/// 32 bytes of 2-bit codes shifted by 0, 2, 4 and 6 (mask with 3 for the codes of each plane).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn two_bit_planes(qs: &[u8]) -> [__m256i; 4] {
    let q = unsafe { load32(qs) };
    [
        q,
        _mm256_srli_epi16::<2>(q),
        _mm256_srli_epi16::<4>(q),
        _mm256_srli_epi16::<6>(q),
    ]
}

/// The unsigned codes (0..15, or 0..31 with `fifth` for Q5_K) of sub-blocks `2n` and `2n + 1`
/// (32 values each) of a Q4_K or Q5_K super-block.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) unsafe fn k_codes(blk: &[u8], fifth: bool, n: usize) -> [__m256i; 2] {
    let m4 = _mm256_set1_epi8(0x0F);
    let qs = if fifth { &blk[48..176] } else { &blk[16..144] };
    // SAFETY: 32-byte loads, bounds-checked in `load32`.
    let q = unsafe { load32(&qs[32 * n..]) };
    let mut out = [
        _mm256_and_si256(q, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
    ];
    if fifth {
        // SAFETY: as above.
        let qh = unsafe { load32(&blk[16..48]) };
        let sixteen = _mm256_set1_epi8(0x10);
        for (half, c) in out.iter_mut().enumerate() {
            let bit = (2 * n + half) as u32;
            *c = _mm256_or_si256(*c, _mm256_and_si256(bit_set(qh, bit), sixteen));
        }
    }
    out
}

/// The unsigned 6-bit codes (0..63) of half `h` of a Q6_K super-block: four groups of 32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) unsafe fn q6_codes(blk: &[u8], h: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    // SAFETY: 32-byte loads, bounds-checked in `load32`.
    let (ql0, ql1, qh) = unsafe {
        (
            load32(&blk[h * 64..]),
            load32(&blk[h * 64 + 32..]),
            load32(&blk[128 + h * 32..]),
        )
    };
    [
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
    ]
}

/// Where a kernel accumulates `Σ scale · (codes · x)`: the SIMD width's part of a kernel.
pub(in super::super) trait Acc: Sized {
    fn new() -> Self;
    /// 32 byte codes against the input's 32 values from `at`, times `scale`.
    ///
    /// # Safety
    /// The CPU has the features of the implementing width; `at + 32 <= x.q.len()`.
    unsafe fn add32(&mut self, codes: __m256i, x: &QuantRow, at: usize, scale: f32);
    /// The same with one scale for each 16-value half.
    ///
    /// # Safety
    /// As [`Acc::add32`].
    unsafe fn add16x2(&mut self, codes: __m256i, x: &QuantRow, at: usize, s0: f32, s1: f32);
    /// The sum of the lanes.
    ///
    /// # Safety
    /// As [`Acc::add32`].
    unsafe fn sum(self) -> f32;
}

/// Eight f32 lanes.
pub(in super::super) struct Lanes8(__m256);

impl Acc for Lanes8 {
    #[inline(always)]
    fn new() -> Self {
        // SAFETY: AVX is part of every width these kernels run at.
        Self(unsafe { _mm256_setzero_ps() })
    }
    #[inline(always)]
    unsafe fn add32(&mut self, codes: __m256i, x: &QuantRow, at: usize, scale: f32) {
        // SAFETY: the caller's contract.
        unsafe { self.0 = fma_i32(dot32_i8(codes, x, at), scale, self.0) }
    }
    #[inline(always)]
    unsafe fn add16x2(&mut self, c: __m256i, x: &QuantRow, at: usize, s0: f32, s1: f32) {
        // SAFETY: the caller's contract.
        unsafe {
            let acc = fma_i32(dot16_i8(_mm256_castsi256_si128(c), x, at), s0, self.0);
            self.0 = fma_i32(
                dot16_i8(_mm256_extracti128_si256::<1>(c), x, at + 16),
                s1,
                acc,
            );
        }
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        // SAFETY: the caller's contract.
        unsafe { hsum(self.0) }
    }
}

#[inline(always)]
#[allow(unused_unsafe)]
pub(in super::super) unsafe fn q2_k_with<A: Acc>(w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: inlined only into the target-feature wrappers below and in `avx512.rs`,
    // whose callers checked the features; every load is bounds-checked.
    unsafe {
        let mut acc = A::new();
        let mut mins = 0f32;
        let m3 = _mm256_set1_epi8(3);
        for (sb, blk) in w.chunks_exact(84).enumerate() {
            let (scales, qs) = (&blk[..16], &blk[16..80]);
            let (d, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
            for n in 0..2 {
                let shifted = unsafe { two_bit_planes(&qs[32 * n..]) };
                for (j, v) in shifted.into_iter().enumerate() {
                    let k = 8 * n + 2 * j;
                    let g = sb * 16 + k;
                    let xd = x.d[g / 2];
                    let (sc0, sc1) = (scales[k], scales[k + 1]);
                    let c = _mm256_and_si256(v, m3);
                    unsafe {
                        acc.add16x2(
                            c,
                            x,
                            16 * g,
                            xd * d * (sc0 & 0x0F) as f32,
                            xd * d * (sc1 & 0x0F) as f32,
                        )
                    };
                    mins += xd
                        * dmin
                        * ((sc0 >> 4) as f32 * x.sum16[g] + (sc1 >> 4) as f32 * x.sum16[g + 1]);
                }
            }
        }
        unsafe { acc.sum() - mins }
    }
}

#[inline(always)]
#[allow(unused_unsafe)]
pub(in super::super) unsafe fn q3_k_with<A: Acc>(w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: inlined only into the target-feature wrappers below and in `avx512.rs`,
    // whose callers checked the features; every load is bounds-checked.
    unsafe {
        let mut acc = A::new();
        let m3 = _mm256_set1_epi8(3);
        let four = _mm256_set1_epi8(4);
        for (sb, blk) in w.chunks_exact(110).enumerate() {
            let hm = unsafe { load32(&blk[..32]) };
            let qs = &blk[32..96];
            let scales = q3_k_scales(&blk[96..108]);
            let d = f16_at(blk, 108);
            for n in 0..2 {
                let shifted = unsafe { two_bit_planes(&qs[32 * n..]) };
                for (j, v) in shifted.into_iter().enumerate() {
                    let k = 8 * n + 2 * j;
                    let g = sb * 16 + k;
                    let xd = x.d[g / 2];
                    // Low two bits, minus 4 where the high bit is clear: −4..3.
                    let low = _mm256_and_si256(v, m3);
                    let clear = _mm256_andnot_si256(bit_set(hm, (4 * n + j) as u32), four);
                    let c = _mm256_sub_epi8(low, clear);
                    unsafe {
                        acc.add16x2(
                            c,
                            x,
                            16 * g,
                            xd * d * scales[k] as f32,
                            xd * d * scales[k + 1] as f32,
                        )
                    };
                }
            }
        }
        unsafe { acc.sum() }
    }
}

/// Q4_K and Q5_K (`fifth`: the 32 high-bit bytes follow the scales).
#[inline(always)]
#[allow(unused_unsafe)]
pub(in super::super) unsafe fn k_blocks<A: Acc>(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    fifth: bool,
) -> f32 {
    // SAFETY: inlined only into the target-feature wrappers below and in `avx512.rs`,
    // whose callers checked the features; every load is bounds-checked.
    unsafe {
        let mut acc = A::new();
        let mut mins = 0f32;
        for (sb, blk) in w.chunks_exact(bytes).enumerate() {
            let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
            let scales = &blk[4..16];
            // Plain loops: a closure here would not inherit the wrappers' target features.
            for n in 0..4 {
                for (half, codes) in k_codes(blk, fifth, n).into_iter().enumerate() {
                    let j = 2 * n + half;
                    let b = sb * 8 + j;
                    let (sc, m) = scale_min(j, scales);
                    // Codes 0..31 read the same as signed bytes.
                    unsafe { acc.add32(codes, x, b * BLOCK, d * sc as f32 * x.d[b]) };
                    let sum = x.sum16[2 * b] + x.sum16[2 * b + 1];
                    mins += x.d[b] * dmin * m as f32 * sum;
                }
            }
        }
        unsafe { acc.sum() - mins }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { q2_k_with::<Lanes8>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q3_k(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { q3_k_with::<Lanes8>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_xs(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { iq4_xs_with::<Lanes8>(w, x) }
}

#[inline(always)]
#[allow(unused_unsafe)]
pub(in super::super) unsafe fn q6_k_with<A: Acc>(w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: inlined only into the target-feature wrappers below and in `avx512.rs`,
    // whose callers checked the features; every load is bounds-checked.
    unsafe {
        let mut acc = A::new();
        let m32 = _mm256_set1_epi8(32);
        for (sb, blk) in w.chunks_exact(210).enumerate() {
            let d = f16_at(blk, 208);
            for h in 0..2 {
                unsafe {
                    let codes = q6_codes(blk, h);
                    for (k, c) in codes.into_iter().enumerate() {
                        // Signed values −32..31: no offset to correct afterwards.
                        let c = _mm256_sub_epi8(c, m32);
                        let b = sb * 8 + h * 4 + k;
                        let sc = &blk[192 + h * 8 + 2 * k..];
                        let (s0, s1) = (
                            d * sc[0] as i8 as f32 * x.d[b],
                            d * sc[1] as i8 as f32 * x.d[b],
                        );
                        acc.add16x2(c, x, b * BLOCK, s0, s1);
                    }
                }
            }
        }
        unsafe { acc.sum() }
    }
}

#[inline(always)]
#[allow(unused_unsafe)]
pub(in super::super) unsafe fn iq4_xs_with<A: Acc>(w: &[u8], x: &QuantRow) -> f32 {
    // SAFETY: inlined only into the target-feature wrappers below and in `avx512.rs`,
    // whose callers checked the features; every load is bounds-checked.
    unsafe {
        let mut acc = A::new();
        for (sb, blk) in w.chunks_exact(136).enumerate() {
            let d = f16_at(blk, 0);
            for ib in 0..8 {
                let b = sb * 8 + ib;
                unsafe {
                    let v = iq4_lookup(nibbles(&blk[8 + 16 * ib..]));
                    let scale = d * iq4_xs_scale(blk, ib) as f32 * x.d[b];
                    acc.add32(v, x, b * BLOCK, scale);
                }
            }
        }
        unsafe { acc.sum() }
    }
}
