//! AVX2 kernels of the 32-value block types (Q4_0, Q4_1, Q5_1, Q8_0, IQ4_NL): each block's
//! codes converted to f32 once and multiplied by the input as given, not quantized (exact to
//! f32 rounding), eight products an FMA; a block's codes serve up to four inputs. On the AMD
//! cores this was measured on (Zen 3), the conversions cost no more than the integer forms that
//! keep the input exact enough (two i16 `madd`s per digit a block), except for Q5_0, whose codes
//! take the most unpacking: it runs in integers (`lanes.rs`).

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::super::{BLOCK, QuantRow};
use super::lanes;
use super::{f16_lanes, hsum, hsums, load16_u8};
use crate::quant::{GgmlType, IQ4_VALUES};

/// 0xFF in byte j where bit j of `qh` is set, 0 elsewhere.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn fifth_set(qh: &[u8]) -> __m256i {
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

/// Scales read as one word: four blocks' f16s, half of a [`GROUP`].
const HALF: usize = 4;

/// The f16 at byte `at` of each of the first `n` blocks (at most four) of `bytes` bytes in
/// `w`, as the 16-bit fields of a word (block i in bits 16i..16i + 16), zero past `n`. Read as
/// scalars: a gather took a fifth of a kernel's time on the AMD cores this was measured on,
/// whose gathers are microcoded.
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_word(w: &[u8], bytes: usize, at: usize, n: usize) -> u64 {
    assert!(n <= HALF && at + 2 <= bytes && w.len() >= n * bytes);
    // SAFETY: block i < n lies in `w` (checked above), and `at + 2 <= bytes`.
    let half = |i: usize| unsafe {
        u64::from(u16::from_le(std::ptr::read_unaligned(
            w.as_ptr().add(i * bytes + at) as *const u16,
        )))
    };
    (0..n).fold(0, |word, i| word | half(i) << (16 * i))
}

/// [`f16_word`] for up to eight blocks, as f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn block_f16s(w: &[u8], bytes: usize, at: usize, n: usize) -> __m256 {
    assert!(n <= GROUP && w.len() >= n * bytes);
    let low = f16_word(w, bytes, at, n.min(HALF));
    let high = match n.checked_sub(HALF) {
        Some(m) if m > 0 => f16_word(&w[HALF * bytes..], bytes, at, m),
        _ => 0,
    };
    _mm256_cvtph_ps(_mm_set_epi64x(high as i64, low as i64))
}

/// `v[from..from + n]` (at most four) as f32 lanes, zero past `n`.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32x4(v: &[f32], from: usize, n: usize) -> __m128 {
    match v.get(from..from + HALF) {
        // SAFETY: four values in bounds.
        Some(v) if n == HALF => unsafe { _mm_loadu_ps(v.as_ptr()) },
        _ => {
            let at = |i: usize| if i < n { v[from + i] } else { 0.0 };
            _mm_setr_ps(at(0), at(1), at(2), at(3))
        }
    }
}

/// `v[from..from + n]` (at most eight) as f32 lanes, zero past `n`.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_lanes(v: &[f32], from: usize, n: usize) -> __m256 {
    let high = f32x4(v, from + HALF, n.saturating_sub(HALF));
    _mm256_set_m128(high, f32x4(v, from, n.min(HALF)))
}

/// A block's 32 codes as f32, eight to a vector, in order.
type Floats = [__m256; 4];

/// Two halves of 16 signed byte codes (each below 128 in magnitude, or −128) as f32.
#[target_feature(enable = "avx2,fma,f16c")]
fn floats(h: (__m128i, __m128i)) -> Floats {
    let f = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    [
        f(h.0),
        f(_mm_srli_si128::<8>(h.0)),
        f(h.1),
        f(_mm_srli_si128::<8>(h.1)),
    ]
}

/// `Σ c·x` in eight f32 lanes for one block's codes against 32 input values at `x`.
///
/// # Safety
/// `x` points at 32 readable f32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_dot(c: &Floats, x: *const f32) -> __m256 {
    // SAFETY: the caller's contract.
    let x = |i: usize| unsafe { _mm256_loadu_ps(x.add(8 * i)) };
    // Two chains of two, not one of four: the block's sum waits on two products, not four.
    let p = _mm256_fmadd_ps(c[2], x(2), _mm256_mul_ps(c[0], x(0)));
    let q = _mm256_fmadd_ps(c[3], x(3), _mm256_mul_ps(c[1], x(1)));
    _mm256_add_ps(p, q)
}

/// `Σ_b scale_b · Σ codes_b · x` over blocks of `bytes` bytes with an f16 scale first and codes
/// as f32 (`codes`), for each of `N` inputs as given (f32, not quantized): each block's codes
/// converted once for all of them, eight products an FMA, the block's scale one more. An
/// input's sums are the same bits whatever `N`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scaled_rows<const N: usize>(
    w: &[u8],
    bytes: usize,
    xs: [&QuantRow; N],
    codes: impl Fn(&[u8]) -> Floats,
) -> [__m256; N] {
    let blocks = w.len() / bytes;
    for x in xs {
        assert!(x.x.len() >= blocks * BLOCK, "the input covers the row");
    }
    let mut acc = [_mm256_setzero_ps(); N];
    for (b, block) in w.chunks_exact(bytes).enumerate() {
        let c = codes(block);
        let d = f16_lanes(block, 0);
        for r in 0..N {
            // SAFETY: block b's 32 values lie in the input (checked above).
            let s = unsafe { block_dot(&c, xs[r].x.as_ptr().add(b * BLOCK)) };
            acc[r] = _mm256_fmadd_ps(d, s, acc[r]);
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
    codes: impl Fn(&[u8]) -> Floats,
) -> __m256 {
    let [v] = unsafe { scaled_rows::<1>(w, bytes, [x], codes) };
    v
}

/// The inputs one pass of [`dot_rows`] takes: each weight block is converted once for them.
pub(super) const ROWS: usize = 4;

/// `w · x` for each of `xs` into `out`, for the types whose blocks are one f16 scale and
/// signed codes (Q4_0, Q5_0, Q8_0, IQ4_NL): each block's codes converted once per [`ROWS`]
/// inputs (Q5_0's decoded once, `lanes.rs`), each input's sums the same bits as one at a
/// time. `false` (nothing written) for the other types.
pub(in super::super) fn dot_rows(ty: GgmlType, w: &[u8], xs: &[QuantRow], out: &mut [f32]) -> bool {
    assert_eq!(xs.len(), out.len(), "one output per input");
    // SAFETY: as in `avx2::dot`: the caller checked the level; whole blocks, padded inputs.
    unsafe {
        match ty {
            GgmlType::Q4_0 => rows(w, 18, xs, out, |b| q4_0_codes(b)),
            GgmlType::Q5_0 => lanes::q5_0_rows(w, xs, out),
            GgmlType::Q8_0 => rows(w, 34, xs, out, |b| q8_0_codes(b)),
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
    codes: impl Fn(&[u8]) -> Floats + Copy,
) {
    for (g, o) in xs.chunks(ROWS).zip(out.chunks_mut(ROWS)) {
        // SAFETY: the caller's contract.
        unsafe {
            match g {
                [a, b, c, d] => hsums(scaled_rows(w, bytes, [a, b, c, d], codes), o),
                [a, b, c] => hsums(scaled_rows(w, bytes, [a, b, c], codes), o),
                [a, b] => hsums(scaled_rows(w, bytes, [a, b], codes), o),
                _ => hsums(scaled_rows(w, bytes, [&g[0]], codes), o),
            }
        }
    }
}

/// Blocks with one f16 scale first and signed codes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn offset_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    codes: impl Fn(&[u8]) -> Floats,
) -> f32 {
    hsum(unsafe { scaled_blocks(w, bytes, x, codes) })
}

/// Blocks with an f16 scale and min first, unsigned codes: the mins times each block's input
/// sum, eight blocks a pass, beside the scaled codes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn min_blocks(w: &[u8], bytes: usize, x: &QuantRow, codes: impl Fn(&[u8]) -> Floats) -> f32 {
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

/// Both halves minus `offset`.
#[target_feature(enable = "avx2,fma,f16c")]
fn minus(h: (__m128i, __m128i), offset: i8) -> (__m128i, __m128i) {
    let o = _mm_set1_epi8(offset);
    (_mm_sub_epi8(h.0, o), _mm_sub_epi8(h.1, o))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_codes(b: &[u8]) -> Floats {
    floats(minus(unsafe { nibble_halves(&b[2..18]) }, 8))
}

/// Q8_0's codes converted eight at a time straight from the block's bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_codes(b: &[u8]) -> Floats {
    assert!(b.len() >= 34);
    // SAFETY: bytes 2 + 8i .. 10 + 8i lie in the block (checked above).
    let at = |i: usize| unsafe {
        let v = _mm_loadl_epi64(b.as_ptr().add(2 + 8 * i) as *const __m128i);
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
    };
    [at(0), at(1), at(2), at(3)]
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_codes(b: &[u8]) -> Floats {
    let (lo, hi) = unsafe { nibble_halves(&b[2..18]) };
    // SAFETY: 16 bytes read from a 16-byte array.
    let table = unsafe { _mm_loadu_si128(IQ4_VALUES.as_ptr() as *const __m128i) };
    floats((_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi)))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 18, x, |b| q4_0_codes(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_1(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { min_blocks(w, 20, x, |b| floats(nibble_halves(&b[4..20]))) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_1(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { min_blocks(w, 24, x, |b| floats(five_bit_halves(&b[4..8], &b[8..24]))) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 34, x, |b| q8_0_codes(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_nl(w: &[u8], x: &QuantRow) -> f32 {
    unsafe { offset_blocks(w, 18, x, |b| iq4_nl_codes(b)) }
}
