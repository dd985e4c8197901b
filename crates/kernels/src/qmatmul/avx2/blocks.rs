//! AVX2 kernels of the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): codes
//! widened to i16 in two halves and dotted with both digits of the input (`madd`), eight
//! blocks a pass whose scales are gathered, converted and multiplied by the input's in one
//! vector; the input's digits bounds-checked once per row.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::super::{BLOCK, LO, QuantRow};
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

/// Blocks per pass of the 32-value kernels: their scales (the f16 of each block times the
/// input's scale) are gathered, converted and multiplied eight at a time, in one vector.
const GROUP: usize = 8;

/// Lanes `0..n` set (all ones), the rest clear.
#[target_feature(enable = "avx2,fma,f16c")]
fn first_lanes(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// The 32-bit words at the start of the first `n` (at most eight) blocks of `bytes` bytes in
/// `w`, zero past `n`: a block's f16 scale in the low half, its min (or its codes) in the high
/// half.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gather_words(w: &[u8], bytes: usize, n: usize) -> __m256i {
    assert!(n <= GROUP && bytes >= 4 && w.len() >= n * bytes);
    let b = bytes as i32;
    let offsets = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b);
    // SAFETY: only the lanes below `n` are read (the mask), each 4 bytes inside its block.
    unsafe {
        _mm256_mask_i32gather_epi32::<1>(
            _mm256_setzero_si256(),
            w.as_ptr() as *const i32,
            offsets,
            first_lanes(n),
        )
    }
}

/// The low (`HIGH` false) or high f16 of each of eight words, as f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn halves_f32<const HIGH: bool>(words: __m256i) -> __m256 {
    // Bytes 0–1 (or 2–3) of each word to the first eight bytes of each 128-bit lane, then the
    // two lanes' eight bytes side by side.
    let a: u8 = if HIGH { 2 } else { 0 };
    let low = u64::from_le_bytes([a, a + 1, a + 4, a + 5, a + 8, a + 9, a + 12, a + 13]) as i64;
    // The upper eight bytes of each lane: all ones (a set top bit zeroes the byte).
    let pick = _mm256_set_epi64x(-1, low, -1, low);
    let packed = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_shuffle_epi8(words, pick));
    _mm256_cvtph_ps(_mm256_castsi256_si128(packed))
}

/// `v[from..from + n]` (at most eight) as f32 lanes, zero past `n`.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_lanes(v: &[f32], from: usize, n: usize) -> __m256 {
    if n == 0 {
        return _mm256_setzero_ps();
    }
    let v = &v[from..from + n];
    // SAFETY: only the lanes below `n` are read (the mask), inside `v`.
    unsafe { _mm256_maskload_ps(v.as_ptr(), first_lanes(n)) }
}

/// `Σ c·x` in eight f32 lanes for 32 signed values given as two halves of i16 codes (values
/// 0–15 and 16–31) against the input's digits at `q` and `lo`: the integer sums against both,
/// joined as `hi + lo · 2⁻¹⁵`.
///
/// # Safety
/// `q` and `lo` are valid for 32 reads each.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32_at(c: [__m256i; 2], q: *const i16, lo: *const i16) -> __m256 {
    let sum = |d: *const i16| unsafe {
        _mm256_add_epi32(
            _mm256_madd_epi16(c[0], _mm256_loadu_si256(d as *const __m256i)),
            _mm256_madd_epi16(c[1], _mm256_loadu_si256(d.add(16) as *const __m256i)),
        )
    };
    _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(sum(lo)),
        _mm256_set1_ps(LO),
        _mm256_cvtepi32_ps(sum(q)),
    )
}

/// Two 16-byte halves of signed i8 codes widened to i16.
#[target_feature(enable = "avx2,fma,f16c")]
fn widen(h: (__m128i, __m128i)) -> [__m256i; 2] {
    [_mm256_cvtepi8_epi16(h.0), _mm256_cvtepi8_epi16(h.1)]
}

/// `Σ_b scale_b · Σ codes_b · x` over blocks of `bytes` bytes with an f16 scale first and
/// signed codes (`codes`, two halves of i8), for each of `N` inputs, each block's codes decoded
/// once for all of them: eight blocks a pass, their scales gathered, converted and multiplied
/// by each input's in one vector, each block's taken from its lane. Blocks in pairs, one
/// accumulator each, so that neither waits on the other's FMA: an input's sums are the same
/// bits whatever `N`. The inputs' digits are bounds-checked once per row, not per block.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scaled_rows<const N: usize>(
    w: &[u8],
    bytes: usize,
    xs: [&QuantRow; N],
    codes: impl Fn(&[u8]) -> (__m128i, __m128i),
) -> [__m256; N] {
    let blocks = w.len() / bytes;
    for x in xs {
        assert!(x.q.len() >= blocks * BLOCK && x.lo.len() >= blocks * BLOCK);
    }
    let one = _mm256_set1_epi32(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    for first in (0..blocks).step_by(GROUP) {
        let n = GROUP.min(blocks - first);
        let group = &w[first * bytes..(first + n) * bytes];
        let d = halves_f32::<false>(unsafe { gather_words(group, bytes, n) });
        let scales = xs.map(|x| _mm256_mul_ps(d, f32_lanes(&x.d, first, n)));
        let mut lane = _mm256_setzero_si256();
        for (k, pair) in group.chunks(2 * bytes).enumerate() {
            let at = (first + 2 * k) * BLOCK;
            let (b0, b1) = pair.split_at(bytes);
            let c = widen(codes(b0));
            for r in 0..N {
                // SAFETY: block `first + 2k` is below `blocks`, whose digits were checked.
                acc[r][0] = unsafe { step(c, xs[r], at, scales[r], lane, acc[r][0]) };
            }
            lane = _mm256_add_epi32(lane, one);
            if !b1.is_empty() {
                let c = widen(codes(b1));
                for r in 0..N {
                    // SAFETY: as above, for block `first + 2k + 1`.
                    acc[r][1] = unsafe { step(c, xs[r], at + BLOCK, scales[r], lane, acc[r][1]) };
                }
                lane = _mm256_add_epi32(lane, one);
            }
        }
    }
    acc.map(|[a0, a1]| _mm256_add_ps(a0, a1))
}

/// One block of [`scaled_rows`] for one input: `acc + (c · x from at) · scales[lane]`.
///
/// # Safety
/// `x`'s digits hold 32 values from `at`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn step(
    c: [__m256i; 2],
    x: &QuantRow,
    at: usize,
    scales: __m256,
    lane: __m256i,
    acc: __m256,
) -> __m256 {
    let p = unsafe { dot32_at(c, x.q.as_ptr().add(at), x.lo.as_ptr().add(at)) };
    _mm256_fmadd_ps(p, _mm256_permutevar8x32_ps(scales, lane), acc)
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
        let m = halves_f32::<true>(unsafe { gather_words(group, bytes, n) });
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
