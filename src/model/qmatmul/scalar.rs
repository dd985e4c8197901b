//! The portable kernels, and the reference the SIMD ones are tested against: per block an integer
//! dot product of the weights' codes with the i16 input, then one f32 scale. Layouts as in
//! `loader::quant` (ggml's `ggml-common.h`).

use half::f16;

use super::{BLOCK, QuantRow};
use crate::loader::quant::GgmlType;

pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `Σ codes[i] · q[i]` over equal lengths.
fn idot(codes: impl Iterator<Item = i32>, q: &[i16]) -> i32 {
    codes.zip(q).map(|(c, &v)| c * v as i32).sum()
}

pub(super) fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    match ty {
        GgmlType::Q8_0 => q8_0(w, x),
        GgmlType::Q5_0 => q5_0(w, x),
        GgmlType::Q4_K => q4_k(w, x),
        GgmlType::Q6_K => q6_k(w, x),
        other => unreachable!("QMatrix::new refuses {other:?}"),
    }
}

fn q8_0(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(34).enumerate() {
        let q = &x.q[b * BLOCK..(b + 1) * BLOCK];
        let s = idot(blk[2..34].iter().map(|&c| c as i8 as i32), q);
        acc += f16_at(blk, 0) * x.d[b] * s as f32;
    }
    acc
}

/// The 32 unsigned 5-bit codes of a Q5_0 block.
pub(super) fn q5_0_codes(blk: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
    let qs = &blk[6..22];
    let mut c = [0u8; 32];
    for j in 0..16 {
        c[j] = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        c[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    c
}

fn q5_0(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(22).enumerate() {
        let q = &x.q[b * BLOCK..(b + 1) * BLOCK];
        let codes = q5_0_codes(blk);
        let sum = x.sum16[2 * b] + x.sum16[2 * b + 1];
        let s = idot(codes.iter().map(|&c| c as i32), q) - 16 * sum;
        acc += f16_at(blk, 0) * x.d[b] * s as f32;
    }
    acc
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K super-block.
pub(super) fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

fn q4_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let scales = &blk[4..16];
        for (n, qs) in blk[16..144].chunks_exact(32).enumerate() {
            for (half, shift) in [(0, 0), (1, 4)] {
                let j = 2 * n + half;
                let b = sb * 8 + j;
                let (sc, m) = scale_min(j, scales);
                let q = &x.q[b * BLOCK..(b + 1) * BLOCK];
                let s = idot(qs.iter().map(|&c| ((c >> shift) & 0x0F) as i32), q);
                let sum = x.sum16[2 * b] + x.sum16[2 * b + 1];
                acc += x.d[b] * (d * sc as f32 * s as f32 - dmin * m as f32 * sum as f32);
            }
        }
    }
    acc
}

/// The 6-bit code of value `32k + l` (l < 32) of half `h` of a Q6_K block.
pub(super) fn q6_code(blk: &[u8], h: usize, k: usize, l: usize) -> u8 {
    let ql = &blk[h * 64..h * 64 + 64];
    let qh = blk[128 + h * 32 + l];
    let low = match k {
        0 => ql[l] & 0x0F,
        1 => ql[l + 32] & 0x0F,
        2 => ql[l] >> 4,
        _ => ql[l + 32] >> 4,
    };
    low | (((qh >> (2 * k)) & 3) << 4)
}

fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(210).enumerate() {
        let d = f16_at(blk, 208);
        for h in 0..2 {
            for k in 0..4 {
                let b = sb * 8 + h * 4 + k;
                for g in 0..2 {
                    let sc = blk[192 + h * 8 + 2 * k + g] as i8 as f32;
                    let start = b * BLOCK + 16 * g;
                    let q = &x.q[start..start + 16];
                    let codes = (16 * g..16 * g + 16).map(|l| q6_code(blk, h, k, l) as i32);
                    let s = idot(codes, q) - 32 * x.sum16[start / 16];
                    acc += d * sc * x.d[b] * s as f32;
                }
            }
        }
    }
    acc
}
