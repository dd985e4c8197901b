//! The portable kernels, and the reference the SIMD ones are tested against: per block (or
//! sub-block) an integer dot product of the weights' codes with the i16 input, then one f32
//! scale; float weights (F32/F16/BF16) against the f32 input. This file holds the 32-value
//! blocks, the floats and the integer parts every portable kernel shares; `scalar_k.rs` the
//! 256-value super-blocks; `portable.rs` picks one per type. Layouts as in
//! `crate::quant` (ggml's `ggml-common.h`).

use half::{bf16, f16};

use super::{BLOCK, LO, QuantRow};
use crate::quant::IQ4_VALUES;

pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `Σ codes[i] · (q + lo · 2⁻¹⁵)[at + i]`: both digits' integer sums, joined in f64.
pub(super) fn idot(codes: impl Iterator<Item = i32>, x: &QuantRow, at: usize) -> f32 {
    let (mut hi, mut lo) = (0i64, 0i64);
    for (i, c) in codes.enumerate() {
        hi += c as i64 * x.q[at + i] as i64;
        lo += c as i64 * x.lo[at + i] as i64;
    }
    (hi as f64 + lo as f64 * LO as f64) as f32
}

/// F32 weights against the f32 input.
pub(super) fn f32s(w: &[u8], x: &QuantRow) -> f32 {
    floats(w.chunks_exact(4), x, |b| {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    })
}

/// F16 weights against the f32 input.
pub(super) fn f16s(w: &[u8], x: &QuantRow) -> f32 {
    floats(w.chunks_exact(2), x, |b| {
        f16::from_le_bytes([b[0], b[1]]).to_f32()
    })
}

/// BF16 weights against the f32 input.
pub(super) fn bf16s(w: &[u8], x: &QuantRow) -> f32 {
    floats(w.chunks_exact(2), x, |b| {
        bf16::from_le_bytes([b[0], b[1]]).to_f32()
    })
}

fn floats<'a>(w: impl Iterator<Item = &'a [u8]>, x: &QuantRow, f: impl Fn(&[u8]) -> f32) -> f32 {
    w.zip(&x.x).map(|(b, &v)| f(b) * v).sum()
}

/// Where block `b` of the input starts, and `Σ x / d` over it (for the types' offsets and
/// minimums).
fn block(x: &QuantRow, b: usize) -> (usize, f32) {
    (b * BLOCK, x.sum16[2 * b] + x.sum16[2 * b + 1])
}

/// The 32 unsigned 4-bit codes of a 32-value block from its 16 bytes (low nibbles first).
pub(super) fn nibbles(qs: &[u8]) -> [u8; 32] {
    let mut c = [0u8; 32];
    for j in 0..16 {
        c[j] = qs[j] & 0x0F;
        c[j + 16] = qs[j] >> 4;
    }
    c
}

/// The 32 unsigned 5-bit codes of a Q5_0/Q5_1 block from its `qh` word and 16 bytes.
pub(super) fn q5_codes(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut c = nibbles(qs);
    for (j, v) in c.iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) as u8) << 4;
    }
    c
}

/// `Σ (code − offset) · q · d · x_d` over the blocks of a type with one f16 scale first.
fn offset_blocks(
    w: &[u8],
    bytes: usize,
    x: &QuantRow,
    offset: i32,
    codes: impl Fn(&[u8]) -> [u8; 32],
) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(bytes).enumerate() {
        let (at, sum) = block(x, b);
        let s = idot(codes(blk).iter().map(|&c| c as i32), x, at) - offset as f32 * sum;
        acc += f16_at(blk, 0) * x.d[b] * s;
    }
    acc
}

/// `Σ (code · d + m) · q · x_d` over the blocks of a type with an f16 scale and min first.
fn min_blocks(w: &[u8], bytes: usize, x: &QuantRow, codes: impl Fn(&[u8]) -> [u8; 32]) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(bytes).enumerate() {
        let (at, sum) = block(x, b);
        let s = idot(codes(blk).iter().map(|&c| c as i32), x, at);
        acc += x.d[b] * (f16_at(blk, 0) * s + f16_at(blk, 2) * sum);
    }
    acc
}

pub(super) fn q4_0(w: &[u8], x: &QuantRow) -> f32 {
    offset_blocks(w, 18, x, 8, |b| nibbles(&b[2..18]))
}

pub(super) fn q4_1(w: &[u8], x: &QuantRow) -> f32 {
    min_blocks(w, 20, x, |b| nibbles(&b[4..20]))
}

pub(super) fn q5_0(w: &[u8], x: &QuantRow) -> f32 {
    offset_blocks(w, 22, x, 16, |b| q5_codes(&b[2..6], &b[6..22]))
}

pub(super) fn q5_1(w: &[u8], x: &QuantRow) -> f32 {
    min_blocks(w, 24, x, |b| q5_codes(&b[4..8], &b[8..24]))
}

pub(super) fn q8_0(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(34).enumerate() {
        let (at, _) = block(x, b);
        let s = idot(blk[2..34].iter().map(|&c| c as i8 as i32), x, at);
        acc += f16_at(blk, 0) * x.d[b] * s;
    }
    acc
}

/// `Σ table[code] · x` for the 16 bytes of 4-bit indices of the 32-value block at `at`.
pub(super) fn iq4_sum(qs: &[u8], x: &QuantRow, at: usize) -> f32 {
    idot(
        nibbles(qs).iter().map(|&c| IQ4_VALUES[c as usize] as i32),
        x,
        at,
    )
}

pub(super) fn iq4_nl(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(18).enumerate() {
        let (at, _) = block(x, b);
        acc += f16_at(blk, 0) * x.d[b] * iq4_sum(&blk[2..18], x, at);
    }
    acc
}
