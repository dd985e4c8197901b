//! AVX2 kernels of the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): codes
//! widened to i16 against the input's i16 digit (`madd`) and kept as bytes against its byte
//! digit (`maddubs`), four blocks a pass whose integer sums are folded into one vector before
//! one conversion and one FMA; the input's digits bounds-checked once per row.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::super::{BLOCK, LO8, QuantRow};
use super::{hsum, load16_u8};
use crate::quant::{GgmlType, IQ4_VALUES};

/// 0xFF in byte j where bit j of `qh` is set, 0 elsewhere.
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_set(qh: &[u8]) -> __m256i {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
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
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
}

/// Blocks per pass of the mins of Q4_1 and Q5_1: eight blocks' mins read, converted and
/// multiplied by the input's sums in one vector.
const GROUP: usize = 8;

/// Blocks per pass of the 32-value kernels: their integer sums are folded into one vector
/// (block k in lanes k and k + 4) before one conversion and one FMA with their four scales.
const QUAD: usize = 4;

/// The f16 at byte `at` of each of the first `n` blocks of `bytes` bytes in `w`, as the 16-bit
/// fields of a word (block i in bits 16i..16i + 16), zero past `n` (at most four). Read as
/// scalars: a gather took a fifth of the Q8_0 kernel's time on the AMD cores this was
/// measured on, whose gathers are microcoded.
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_word(w: &[u8], bytes: usize, at: usize, n: usize) -> u64 {
    assert!(n <= QUAD && at + 2 <= bytes && w.len() >= n * bytes);
    // SAFETY: block i < n lies in `w` (checked above), and `at + 2 <= bytes`.
    let half = |i: usize| unsafe {
        u64::from(u16::from_le(std::ptr::read_unaligned(
            w.as_ptr().add(i * bytes + at) as *const u16,
        )))
    };
    if n == QUAD {
        return half(0) | half(1) << 16 | half(2) << 32 | half(3) << 48;
    }
    (0..n).fold(0, |word, i| word | half(i) << (16 * i))
}

/// [`f16_word`] for up to eight blocks, as f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn block_f16s(w: &[u8], bytes: usize, at: usize, n: usize) -> __m256 {
    assert!(n <= GROUP && w.len() >= n * bytes);
    let low = f16_word(w, bytes, at, n.min(QUAD));
    let high = match n.checked_sub(QUAD) {
        Some(m) if m > 0 => f16_word(&w[QUAD * bytes..], bytes, at, m),
        _ => 0,
    };
    _mm256_cvtph_ps(_mm_set_epi64x(high as i64, low as i64))
}

/// `v[from..from + n]` (at most four) as f32 lanes, zero past `n`.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32x4(v: &[f32], from: usize, n: usize) -> __m128 {
    match v.get(from..from + QUAD) {
        // SAFETY: four values in bounds.
        Some(v) if n == QUAD => unsafe { _mm_loadu_ps(v.as_ptr()) },
        _ => {
            let at = |i: usize| if i < n { v[from + i] } else { 0.0 };
            _mm_setr_ps(at(0), at(1), at(2), at(3))
        }
    }
}

/// `v[from..from + n]` (at most eight) as f32 lanes, zero past `n`.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_lanes(v: &[f32], from: usize, n: usize) -> __m256 {
    let high = f32x4(v, from + QUAD, n.saturating_sub(QUAD));
    _mm256_set_m128(high, f32x4(v, from, n.min(QUAD)))
}

/// A block's 32 signed codes in the three forms its sums take: widened to i16 in two halves
/// (against the input's i16 digit, `madd`), as bytes (their signs) and as magnitudes (the
/// unsigned side of `maddubs`, against the input's byte digit).
#[derive(Clone, Copy)]
struct Codes {
    wide: [__m256i; 2],
    bytes: __m256i,
    magnitude: __m256i,
}

#[target_feature(enable = "avx2,fma,f16c")]
fn decoded(h: (__m128i, __m128i)) -> Codes {
    let bytes = _mm256_set_m128i(h.1, h.0);
    Codes {
        wide: [_mm256_cvtepi8_epi16(h.0), _mm256_cvtepi8_epi16(h.1)],
        bytes,
        magnitude: _mm256_abs_epi8(bytes),
    }
}

/// One block's integer sums against one input from value `at`: `Σ c·q` in eight i32 lanes
/// (at most 32 · 128 · 32767 < 2³¹ in all), and `Σ c·lo8` in sixteen i16 lanes, each of two
/// products (at most 2 · 128 · 63 = 16,128).
///
/// # Safety
/// `x`'s digits hold 32 values from `at`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_sums(c: Codes, x: &QuantRow, at: usize) -> (__m256i, __m256i) {
    // SAFETY: the caller's contract.
    let (q, lo8) = unsafe {
        (
            x.q.as_ptr().add(at) as *const __m256i,
            x.lo8.as_ptr().add(at) as *const __m256i,
        )
    };
    let hi = unsafe {
        _mm256_add_epi32(
            _mm256_madd_epi16(c.wide[0], _mm256_loadu_si256(q)),
            _mm256_madd_epi16(c.wide[1], _mm256_loadu_si256(q.add(1))),
        )
    };
    // |c| · (lo8 with c's sign) = c · lo8, the unsigned side holding the magnitudes.
    let signed = _mm256_sign_epi8(unsafe { _mm256_loadu_si256(lo8) }, c.bytes);
    (hi, _mm256_maddubs_epi16(c.magnitude, signed))
}

/// Both digits' sums of two blocks folded into one vector of i32 each, block `a`'s in lanes
/// 0–1 and 4–5, `b`'s in lanes 2–3 and 6–7 (`hadd` stays within each 128-bit lane). The byte
/// digit's i16 lanes are added in pairs first (four products, at most 32,256: no overflow),
/// then widened by one `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
fn fold_blocks(a: (__m256i, __m256i), b: (__m256i, __m256i)) -> [__m256i; 2] {
    let lo = _mm256_madd_epi16(_mm256_hadd_epi16(a.1, b.1), _mm256_set1_epi16(1));
    [_mm256_hadd_epi32(a.0, b.0), lo]
}

/// Two pairs' folded sums into one vector per digit: block k of the four in lanes k and k + 4.
#[target_feature(enable = "avx2,fma,f16c")]
fn fold_pairs(a: [__m256i; 2], b: [__m256i; 2]) -> [__m256i; 2] {
    [_mm256_hadd_epi32(a[0], b[0]), _mm256_hadd_epi32(a[1], b[1])]
}

/// The integer sums of the (up to) four blocks of `quad` for each input, block k's in lanes
/// k and k + 4 of each digit's vector; a block past the end sums to zero.
///
/// # Safety
/// Each input's digits hold the quad's values from `at`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quad_sums<const N: usize>(
    quad: &[u8],
    bytes: usize,
    xs: [&QuantRow; N],
    at: usize,
    codes: &impl Fn(&[u8]) -> (__m128i, __m128i),
) -> [[__m256i; 2]; N] {
    let block = |k: usize| -> [(__m256i, __m256i); N] {
        let Some(b) = quad.get(k * bytes..(k + 1) * bytes) else {
            return [(_mm256_setzero_si256(), _mm256_setzero_si256()); N];
        };
        let c = decoded(codes(b));
        // SAFETY: the caller's contract, for block k of the quad.
        xs.map(|x| unsafe { block_sums(c, x, at + k * BLOCK) })
    };
    let (b0, b1) = (block(0), block(1));
    let low: [_; N] = std::array::from_fn(|r| fold_blocks(b0[r], b1[r]));
    let (b2, b3) = (block(2), block(3));
    std::array::from_fn(|r| fold_pairs(low[r], fold_blocks(b2[r], b3[r])))
}

/// `Σ_b scale_b · Σ codes_b · x` over blocks of `bytes` bytes with an f16 scale first and
/// signed codes (`codes`, two halves of i8), for each of `N` inputs, each block's codes decoded
/// once for all of them: four blocks a pass, their scales read, converted and multiplied by
/// each input's in one vector, their integer sums folded into one vector before one
/// conversion and one FMA. An input's sums are the same bits whatever `N`. The inputs' digits
/// are bounds-checked once per row, not per block.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scaled_rows<const N: usize>(
    w: &[u8],
    bytes: usize,
    xs: [&QuantRow; N],
    codes: impl Fn(&[u8]) -> (__m128i, __m128i),
) -> [__m256; N] {
    let blocks = w.len() / bytes;
    for x in xs {
        assert!(x.q.len() >= blocks * BLOCK && x.lo8.len() >= blocks * BLOCK);
    }
    let mut acc = [_mm256_setzero_ps(); N];
    for first in (0..blocks).step_by(QUAD) {
        let n = QUAD.min(blocks - first);
        let quad = &w[first * bytes..(first + n) * bytes];
        let d = _mm_cvtph_ps(_mm_cvtsi64_si128(f16_word(quad, bytes, 0, n) as i64));
        // SAFETY: the quad's blocks are below `blocks`, whose digits were checked.
        let sums = unsafe { quad_sums(quad, bytes, xs, first * BLOCK, &codes) };
        for r in 0..N {
            // Lanes k and k + 4 take block k's scale.
            let s = _mm_mul_ps(d, f32x4(&xs[r].d, first, n));
            let [hi, lo] = sums[r];
            let v = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(lo),
                _mm256_set1_ps(LO8),
                _mm256_cvtepi32_ps(hi),
            );
            acc[r] = _mm256_fmadd_ps(v, _mm256_set_m128(s, s), acc[r]);
        }
    }
    acc
}

/// [`scaled_rows`] for one input.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scaled_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    codes: impl Fn(&[u8]) -> (__m128i, __m128i),
) -> __m256 {
    let [v] = unsafe { scaled_rows::<1>(w, bytes, [x], codes) };
    v
}

/// The inputs one pass of [`dot_rows`] takes: each weight block is decoded once for them.
const ROWS: usize = 4;

/// `w · x` for each of `xs` into `out`, for the types whose blocks are one f16 scale and
/// signed codes that take work to decode (Q4_0, Q5_0, IQ4_NL): each block's codes decoded
/// once per [`ROWS`] inputs, each input's sums the same bits as one at a time. `false`
/// (nothing written) for the other types; Q8_0's codes are a load, and four inputs' registers
/// at 256 bits made it slower than one input at a time (91 against 75 µs for 8 inputs of a
/// 2048 × 640 matrix).
pub(in super::super) fn dot_rows(ty: GgmlType, w: &[u8], xs: &[QuantRow], out: &mut [f32]) -> bool {
    assert_eq!(xs.len(), out.len(), "one output per input");
    // SAFETY: as in `avx2::dot`: the caller checked the level; whole blocks, padded inputs.
    unsafe {
        match ty {
            GgmlType::Q4_0 => rows(w, 18, xs, out, |b| q4_0_codes(b)),
            GgmlType::Q5_0 => rows(w, 22, xs, out, |b| q5_0_codes(b)),
            GgmlType::IQ4_NL => rows(w, 18, xs, out, |b| iq4_nl_codes(b)),
            _ => return false,
        }
    }
    true
}

/// [`dot_rows`] over groups of [`ROWS`] inputs, then the rest in one group of fewer.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows(
    w: &[u8],
    bytes: usize,
    xs: &[QuantRow],
    out: &mut [f32],
    codes: impl Fn(&[u8]) -> (__m128i, __m128i) + Copy,
) {
    for (g, o) in xs.chunks(ROWS).zip(out.chunks_mut(ROWS)) {
        // SAFETY: the caller's contract.
        let sums: Vec<__m256> = unsafe {
            match g {
                [a, b, c, d] => scaled_rows(w, bytes, [a, b, c, d], codes).to_vec(),
                [a, b, c] => scaled_rows(w, bytes, [a, b, c], codes).to_vec(),
                [a, b] => scaled_rows(w, bytes, [a, b], codes).to_vec(),
                _ => scaled_rows(w, bytes, [&g[0]], codes).to_vec(),
            }
        };
        for (o, v) in o.iter_mut().zip(sums) {
            *o = hsum(v);
        }
    }
}

/// Blocks with one f16 scale first and signed codes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn offset_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    codes: impl Fn(&[u8]) -> (__m128i, __m128i),
) -> f32 {
    hsum(unsafe { scaled_blocks(w, bytes, x, codes) })
}

/// Blocks with an f16 scale and min first, unsigned codes: the mins times each block's input
/// sum, eight blocks a pass, beside the scaled codes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn min_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    codes: impl Fn(&[u8]) -> (__m128i, __m128i),
) -> f32 {
    let blocks = w.len() / bytes;
    let mut mins = _mm256_setzero_ps();
    for first in (0..blocks).step_by(GROUP) {
        let n = GROUP.min(blocks - first);
        let group = &w[first * bytes..(first + n) * bytes];
        // Each block's two sums of 16, added in pairs: `hadd` pairs within each 128-bit lane,
        // the permute puts the blocks back in order.
        let (s0, s1) = (
            f32_lanes(&x.sum16, 2 * first, (2 * n).min(GROUP)),
            f32_lanes(&x.sum16, 2 * first + GROUP, (2 * n).saturating_sub(GROUP)),
        );
        let sums = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
            _mm256_hadd_ps(s0, s1),
        )));
        let m = block_f16s(group, bytes, 2, n);
        mins = _mm256_fmadd_ps(_mm256_mul_ps(m, f32_lanes(&x.d, first, n)), sums, mins);
    }
    hsum(unsafe { scaled_blocks(w, bytes, x, codes) }) + hsum(mins)
}

/// A block's 32 4-bit codes from its 16 bytes at `qs`: low nibbles (values 0–15), high ones.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibble_halves(qs: &[u8]) -> (__m128i, __m128i) {
    let m4 = _mm_set1_epi8(0x0F);
    let q = unsafe { load16_u8(qs) };
    (
        _mm_and_si128(q, m4),
        _mm_and_si128(_mm_srli_epi16::<4>(q), m4),
    )
}

/// Q5_1's codes (0..31): the nibbles at `qs`, 16 added where the bit at `qh` is set.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn five_bit_halves(qh: &[u8], qs: &[u8]) -> (__m128i, __m128i) {
    let (lo, hi) = unsafe { nibble_halves(qs) };
    let f = _mm256_and_si256(fifth_set(qh), _mm256_set1_epi8(0x10));
    (
        _mm_or_si128(lo, _mm256_castsi256_si128(f)),
        _mm_or_si128(hi, _mm256_extracti128_si256::<1>(f)),
    )
}

/// Q5_0's values (−16..15): the nibbles at `qs`, less 16 where the bit at `qh` is clear.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn five_bit_signed(qh: &[u8], qs: &[u8]) -> (__m128i, __m128i) {
    let (lo, hi) = unsafe { nibble_halves(qs) };
    let clear = _mm256_andnot_si256(fifth_set(qh), _mm256_set1_epi8(16));
    (
        _mm_sub_epi8(lo, _mm256_castsi256_si128(clear)),
        _mm_sub_epi8(hi, _mm256_extracti128_si256::<1>(clear)),
    )
}

/// Both halves minus `offset`.
#[target_feature(enable = "avx2,fma,f16c")]
fn minus(h: (__m128i, __m128i), offset: i8) -> (__m128i, __m128i) {
    let o = _mm_set1_epi8(offset);
    (_mm_sub_epi8(h.0, o), _mm_sub_epi8(h.1, o))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_codes(b: &[u8]) -> (__m128i, __m128i) {
    minus(unsafe { nibble_halves(&b[2..18]) }, 8)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_codes(b: &[u8]) -> (__m128i, __m128i) {
    unsafe { five_bit_signed(&b[2..6], &b[6..22]) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_codes(b: &[u8]) -> (__m128i, __m128i) {
    unsafe { (load16_u8(&b[2..18]), load16_u8(&b[18..34])) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_codes(b: &[u8]) -> (__m128i, __m128i) {
    let (lo, hi) = unsafe { nibble_halves(&b[2..18]) };
    // SAFETY: 16 bytes read from a 16-byte array.
    let table = unsafe { _mm_loadu_si128(IQ4_VALUES.as_ptr() as *const __m128i) };
    (_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 18, x, |b| q4_0_codes(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_1(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { min_blocks(w, 20, x, |b| nibble_halves(&b[4..20])) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 22, x, |b| q5_0_codes(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_1(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { min_blocks(w, 24, x, |b| five_bit_halves(&b[4..8], &b[8..24])) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 34, x, |b| q8_0_codes(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_nl(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 18, x, |b| iq4_nl_codes(b)) }
}
