//! The portable kernels of the 256-value super-block types (Q2_K..Q6_K, IQ4_XS): per sub-block
//! an integer dot product of the codes with the i16 input, scaled in f32. The reference the SIMD
//! kernels are tested against.

use super::scalar::{f16_at, idot, iq4_sum};
use super::{BLOCK, QuantRow};
use crate::quant::{iq4_xs_scale, q3_k_scales};

/// The 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K super-block.
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

pub(super) fn q2_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(84).enumerate() {
        let (scales, qs) = (&blk[..16], &blk[16..80]);
        let (d, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
        for (k, &sc) in scales.iter().enumerate() {
            // Group k holds values 16k..16k + 16 of the block: half n, shift j, bytes l.
            let (n, j, l0) = (k / 8, (k / 2) % 4, 16 * (k % 2));
            let codes = qs[32 * n + l0..32 * n + l0 + 16]
                .iter()
                .map(|&c| ((c >> (2 * j)) & 3) as i32);
            let g = sb * 16 + k;
            let s = idot(codes, x, 16 * g);
            let xd = x.d[g / 2];
            acc += xd * (d * (sc & 0x0F) as f32 * s - dmin * (sc >> 4) as f32 * x.sum16[g]);
        }
    }
    acc
}

pub(super) fn q3_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(110).enumerate() {
        let (hmask, qs) = (&blk[..32], &blk[32..96]);
        let scales = q3_k_scales(&blk[96..108]);
        let d = f16_at(blk, 108);
        for (k, &sc) in scales.iter().enumerate() {
            let (n, j, l0) = (k / 8, (k / 2) % 4, 16 * (k % 2));
            let codes = (l0..l0 + 16).map(|l| {
                let low = ((qs[32 * n + l] >> (2 * j)) & 3) as i32;
                let high = ((hmask[l] >> (4 * n + j)) & 1) as i32;
                low + 4 * high - 4
            });
            let g = sb * 16 + k;
            let s = idot(codes, x, 16 * g);
            acc += d * sc as f32 * x.d[g / 2] * s;
        }
    }
    acc
}

/// Q4_K (`fifth` None) and Q5_K (`fifth` the 32 high-bit bytes): sub-block `j` of 32 values
/// takes nibble `j % 2` of bytes `32 (j / 2)..` and bit `j` of each high-bit byte.
fn k_blocks(w: &[u8], bytes: usize, x: &QuantRow, fifth: bool) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(bytes).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let scales = &blk[4..16];
        let (qh, qs) = if fifth {
            (&blk[16..48], &blk[48..176])
        } else {
            (&blk[..0], &blk[16..144])
        };
        for j in 0..8 {
            let b = sb * 8 + j;
            let (sc, m) = scale_min(j, scales);
            let src = &qs[32 * (j / 2)..32 * (j / 2) + 32];
            let codes = src.iter().enumerate().map(|(l, &c)| {
                let low = ((c >> (4 * (j % 2))) & 0x0F) as i32;
                let high = if fifth { ((qh[l] >> j) & 1) as i32 } else { 0 };
                low + 16 * high
            });
            let s = idot(codes, x, b * BLOCK);
            let sum = x.sum16[2 * b] + x.sum16[2 * b + 1];
            acc += x.d[b] * (d * sc as f32 * s - dmin * m as f32 * sum);
        }
    }
    acc
}

pub(super) fn q4_k(w: &[u8], x: &QuantRow) -> f32 {
    k_blocks(w, 144, x, false)
}

pub(super) fn q5_k(w: &[u8], x: &QuantRow) -> f32 {
    k_blocks(w, 176, x, true)
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

pub(super) fn q6_k(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(210).enumerate() {
        let d = f16_at(blk, 208);
        for h in 0..2 {
            for k in 0..4 {
                let b = sb * 8 + h * 4 + k;
                for g in 0..2 {
                    let sc = blk[192 + h * 8 + 2 * k + g] as i8 as f32;
                    let start = b * BLOCK + 16 * g;
                    let codes = (16 * g..16 * g + 16).map(|l| q6_code(blk, h, k, l) as i32);
                    let s = idot(codes, x, start) - 32.0 * x.sum16[start / 16];
                    acc += d * sc * x.d[b] * s;
                }
            }
        }
    }
    acc
}

pub(super) fn iq4_xs(w: &[u8], x: &QuantRow) -> f32 {
    let mut acc = 0f32;
    for (sb, blk) in w.chunks_exact(136).enumerate() {
        let d = f16_at(blk, 0);
        for ib in 0..8 {
            let b = sb * 8 + ib;
            let s = iq4_sum(&blk[8 + 16 * ib..8 + 16 * ib + 16], x, b * BLOCK);
            acc += d * iq4_xs_scale(blk, ib) as f32 * x.d[b] * s;
        }
    }
    acc
}
