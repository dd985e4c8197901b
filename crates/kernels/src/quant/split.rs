//! Every GGML block type as small signed integers, a scale and an offset per sub-block:
//! `value = scale · int + offset`. That is the form a GPU's block-scaled integer tensors take
//! (burn's `Q4F`/`Q8F` with one scale per 16 or 32 values), with the offset carried beside them
//! as a small dense matrix, so that every type maps without requantizing: the integers are the
//! file's own codes, re-centred, and the scales and offsets are computed as the reference
//! decoders compute them (`super::blocks`), in f32.

use super::blocks::{h, scale_min_k4};
use super::{GgmlType, IQ4_VALUES, iq4_xs_scale, q3_k_scales};

/// How a type splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitKind {
    /// Values per scale (and per offset): 16 or 32.
    pub sub: usize,
    /// Bits the integers need: 4 (`-8..=7`) or 8 (`-128..=127`).
    pub bits: u32,
    /// Whether the type has an offset (a min) per sub-block.
    pub offset: bool,
    /// Whether every scale is an f16 of the file (so f16 scales are exact).
    pub f16_scales: bool,
}

/// One tensor's blocks, split: integers in the weights' order, scales and offsets per sub-block.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The layout.
    pub kind: SplitKind,
    /// One per weight.
    pub ints: Vec<i8>,
    /// One per sub-block.
    pub scales: Vec<f32>,
    /// One per sub-block when [`SplitKind::offset`]; empty otherwise.
    pub offsets: Vec<f32>,
}

impl GgmlType {
    /// How this type splits, or `None` for the float types (which stay dense).
    pub fn split_kind(self) -> Option<SplitKind> {
        let kind = |sub, bits, offset, f16_scales| {
            Some(SplitKind {
                sub,
                bits,
                offset,
                f16_scales,
            })
        };
        match self {
            Self::F32 | Self::F16 | Self::BF16 => None,
            Self::Q4_0 => kind(32, 4, false, true),
            Self::Q4_1 => kind(32, 4, true, true),
            Self::Q5_0 | Self::Q8_0 | Self::IQ4_NL => kind(32, 8, false, true),
            Self::Q5_1 => kind(32, 8, true, true),
            Self::Q2_K => kind(16, 4, true, false),
            Self::Q3_K => kind(16, 4, false, false),
            Self::Q4_K => kind(32, 4, true, false),
            Self::Q5_K => kind(32, 8, true, false),
            Self::Q6_K => kind(16, 8, false, false),
            Self::IQ4_XS => kind(32, 8, false, false),
        }
    }

    /// Splits whole blocks, or `None` for the float types.
    pub fn split(self, data: &[u8]) -> Option<Split> {
        let kind = self.split_kind()?;
        let (per, bytes) = self.block();
        let n = data.len() / bytes * per;
        let mut out = Split {
            kind,
            ints: vec![0; n],
            scales: vec![0.0; n / kind.sub],
            offsets: vec![0.0; if kind.offset { n / kind.sub } else { 0 }],
        };
        let subs = per / kind.sub;
        for (i, b) in data.chunks_exact(bytes).enumerate() {
            let ints = &mut out.ints[i * per..(i + 1) * per];
            let scales = &mut out.scales[i * subs..(i + 1) * subs];
            let offsets = match kind.offset {
                true => &mut out.offsets[i * subs..(i + 1) * subs],
                false => &mut [][..],
            };
            self.split_block(b, ints, scales, offsets);
        }
        Some(out)
    }

    fn split_block(self, b: &[u8], q: &mut [i8], s: &mut [f32], o: &mut [f32]) {
        match self {
            Self::Q4_0 => {
                nibbles(&b[2..18], q, |c| c as i8 - 8);
                s[0] = h(b, 0);
            }
            Self::Q4_1 => {
                let (d, m) = (h(b, 0), h(b, 2));
                nibbles(&b[4..20], q, |c| c as i8 - 8);
                (s[0], o[0]) = (d, m + 8.0 * d);
            }
            Self::Q5_0 => {
                five_bits(&b[2..6], &b[6..22], q);
                s[0] = h(b, 0);
            }
            Self::Q5_1 => {
                let (d, m) = (h(b, 0), h(b, 2));
                five_bits(&b[4..8], &b[8..24], q);
                (s[0], o[0]) = (d, m + 16.0 * d);
            }
            Self::Q8_0 => {
                q.iter_mut().zip(&b[2..34]).for_each(|(q, &c)| *q = c as i8);
                s[0] = h(b, 0);
            }
            Self::IQ4_NL => {
                nibbles(&b[2..18], q, |c| IQ4_VALUES[c as usize]);
                s[0] = h(b, 0);
            }
            Self::IQ4_XS => {
                let d = h(b, 0);
                for (ib, q) in q.chunks_exact_mut(32).enumerate() {
                    nibbles(&b[8 + 16 * ib..24 + 16 * ib], q, |c| IQ4_VALUES[c as usize]);
                    s[ib] = d * iq4_xs_scale(b, ib) as f32;
                }
            }
            Self::Q2_K => q2_k(b, q, s, o),
            Self::Q3_K => q3_k(b, q, s),
            Self::Q4_K | Self::Q5_K => q45_k(self == Self::Q5_K, b, q, s, o),
            Self::Q6_K => q6_k(b, q, s),
            Self::F32 | Self::F16 | Self::BF16 => unreachable!("float types do not split"),
        }
    }
}

/// 32 codes from 16 bytes, low nibbles first (values j and j + 16 share byte j).
fn nibbles(qs: &[u8], q: &mut [i8], f: impl Fn(u8) -> i8) {
    for (j, &c) in qs.iter().enumerate() {
        q[j] = f(c & 0x0F);
        q[j + 16] = f(c >> 4);
    }
}

/// The 32 five-bit codes of a Q5_0/Q5_1 block, less 16.
fn five_bits(qh: &[u8], qs: &[u8], q: &mut [i8]) {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, &c) in qs.iter().enumerate() {
        let lo = (c & 0x0F) as u32 | (((qh >> j) & 1) << 4);
        let hi = (c >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
        q[j] = lo as i8 - 16;
        q[j + 16] = hi as i8 - 16;
    }
}

/// `dl · q − ml` with `q` in 0..=3: integers `q − 2`, offset `2·dl − ml`.
fn q2_k(b: &[u8], q: &mut [i8], s: &mut [f32], o: &mut [f32]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (h(b, 80), h(b, 82));
    for (i, q) in q.iter_mut().enumerate() {
        let (n, j, l) = (i / 128, (i / 32) % 4, i % 32);
        *q = ((qs[32 * n + l] >> (2 * j)) & 3) as i8 - 2;
    }
    for (g, &sc) in scales.iter().enumerate() {
        let dl = d * (sc & 0x0F) as f32;
        (s[g], o[g]) = (dl, 2.0 * dl - dmin * (sc >> 4) as f32);
    }
}

/// `d · sc · q` with `q` in -4..=3.
fn q3_k(b: &[u8], q: &mut [i8], s: &mut [f32]) {
    let (hmask, qs) = (&b[..32], &b[32..96]);
    let d = h(b, 108);
    for (i, q) in q.iter_mut().enumerate() {
        let (n, j, l) = (i / 128, (i / 32) % 4, i % 32);
        let low = ((qs[32 * n + l] >> (2 * j)) & 3) as i8;
        let high = (hmask[l] >> (4 * n + j)) & 1;
        *q = low - if high == 0 { 4 } else { 0 };
    }
    for (s, sc) in s.iter_mut().zip(q3_k_scales(&b[96..108])) {
        *s = d * sc as f32;
    }
}

/// `d·sc · q − dmin·m`, `q` in 0..=15 (Q4_K) or 0..=31 (Q5_K): integers `q − 8` or `q − 16`.
fn q45_k(five: bool, b: &[u8], q: &mut [i8], s: &mut [f32], o: &mut [f32]) {
    let (d, dmin) = (h(b, 0), h(b, 2));
    let scales = &b[4..16];
    let (qh, qs) = if five {
        (&b[16..48], &b[48..176])
    } else {
        (&[][..], &b[16..144])
    };
    let centre: i8 = if five { 16 } else { 8 };
    for (n, ql) in qs.chunks_exact(32).enumerate() {
        for half in 0..2 {
            let g = 2 * n + half;
            let (sc, m) = scale_min_k4(g, scales);
            let dl = d * sc;
            (s[g], o[g]) = (dl, centre as f32 * dl - dmin * m);
            for l in 0..32 {
                let low = if half == 0 { ql[l] & 0x0F } else { ql[l] >> 4 };
                let high = if five && qh[l] & (1 << g) != 0 { 16 } else { 0 };
                q[64 * n + 32 * half + l] = (low + high) as i8 - centre;
            }
        }
    }
}

/// `d · sc · q` with `q` in -32..=31, one scale per 16 values.
fn q6_k(b: &[u8], q: &mut [i8], s: &mut [f32]) {
    let d = h(b, 208);
    for half in 0..2 {
        let ql = &b[half * 64..half * 64 + 64];
        let qh = &b[128 + half * 32..128 + half * 32 + 32];
        let q = &mut q[half * 128..half * 128 + 128];
        for l in 0..32 {
            q[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
            q[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    for (s, &sc) in s.iter_mut().zip(&b[192..208]) {
        *s = d * (sc as i8) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{SUPPORTED, sample_blocks};

    #[test]
    fn every_type_splits_into_its_own_values() {
        for (i, ty) in SUPPORTED.into_iter().enumerate() {
            let Some(kind) = ty.split_kind() else {
                continue;
            };
            let data = sample_blocks(ty, 24, 11 + i as u64);
            let want = ty.dequantize(&data);
            let split = ty.split(&data).expect("a block type splits");
            let (lo, hi) = (-(1i32 << (kind.bits - 1)), (1i32 << (kind.bits - 1)) - 1);
            for (i, (&q, &w)) in split.ints.iter().zip(&want).enumerate() {
                assert!((lo..=hi).contains(&(q as i32)), "{ty:?}: int {q} at {i}");
                let g = i / kind.sub;
                let offset = split.offsets.get(g).copied().unwrap_or(0.0);
                let got = split.scales[g] * q as f32 + offset;
                // Both sides round in f32 once or twice: a few ulps of the block's largest value.
                let tol = 4.0 * f32::EPSILON * (split.scales[g].abs() * 128.0 + offset.abs());
                assert!(
                    (got - w).abs() <= tol,
                    "{ty:?} value {i}: {got} against {w}"
                );
            }
            if kind.f16_scales {
                for s in &split.scales {
                    assert_eq!(half::f16::from_f32(*s).to_f32(), *s, "{ty:?}: f16 scale");
                }
            }
        }
    }

    #[test]
    fn float_types_do_not_split() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            assert!(ty.split(&[0; 4]).is_none());
        }
    }
}
