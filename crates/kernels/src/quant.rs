//! GGML tensor types and their block layouts, with dequantization to f32. Kept apart from the
//! GGUF container: the model's quantized kernels (`model::qmatmul`) read the same layouts.
//!
//! Layouts follow ggml's `ggml-common.h`; each function turns whole blocks into values in the
//! order ggml's reference `dequantize_row_*` produces them.

#![allow(unsafe_code)]

use half::{bf16, f16};

/// A GGML tensor type this reader knows by id (named as ggml names them).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    BF16,
    /// 32 weights: f16 scale, 4-bit values − 8.
    Q4_0,
    /// 32 weights: f16 scale and min, 4-bit values.
    Q4_1,
    /// 32 weights: f16 scale, 5-bit values − 16.
    Q5_0,
    /// 32 weights: f16 scale and min, 5-bit values.
    Q5_1,
    /// 32 weights: f16 scale, 8-bit values.
    Q8_0,
    /// 256 weights: 16 sub-blocks with 4-bit scales and mins, 2-bit values.
    Q2_K,
    /// 256 weights: 16 sub-blocks with 6-bit scales, 3-bit values − 4.
    Q3_K,
    /// 256 weights: 8 sub-blocks with 6-bit scales and mins, 4-bit values.
    Q4_K,
    /// 256 weights: like Q4_K with a fifth bit.
    Q5_K,
    /// 256 weights: 16 sub-blocks with 8-bit scales, 6-bit values − 32.
    Q6_K,
    /// 32 weights: f16 scale, 4-bit indices into a non-linear table.
    IQ4_NL,
    /// 256 weights: 8 sub-blocks with 6-bit scales, 4-bit indices into IQ4_NL's table.
    IQ4_XS,
}

/// Every type, in ggml's id order: what a file may hold and the kernels read.
pub const SUPPORTED: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::BF16,
];

/// The IQ4_NL/IQ4_XS code book (ggml's `kvalues_iq4nl`).
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

impl GgmlType {
    /// The type for a GGUF type id, or `None` for types this reader cannot dequantize.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            20 => Self::IQ4_NL,
            23 => Self::IQ4_XS,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ4_XS => "IQ4_XS",
        }
    }

    /// The supported types' names, comma-separated (for error messages).
    pub fn supported_list() -> String {
        SUPPORTED.map(Self::name).join(", ")
    }

    /// ggml's name for a type id, known or not (for error messages).
    pub fn name_of(id: u32) -> String {
        const NAMES: [&str; 31] = [
            "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
            "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
            "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
            "BF16",
        ];
        NAMES
            .get(id as usize)
            .map(|s| s.to_string())
            .unwrap_or_else(|| format!("type {id}"))
    }

    /// Weights per block and bytes per block.
    pub fn block(self) -> (usize, usize) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::BF16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q2_K => (256, 84),
            Self::Q3_K => (256, 110),
            Self::Q4_K => (256, 144),
            Self::Q5_K => (256, 176),
            Self::Q6_K => (256, 210),
            Self::IQ4_NL => (32, 18),
            Self::IQ4_XS => (256, 136),
        }
    }

    /// Bytes taken by `n` weights, or `None` when `n` is not a whole number of blocks.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let (per, bytes) = self.block();
        n.is_multiple_of(per)
            .then(|| (n / per).checked_mul(bytes))
            .flatten()
    }

    /// Dequantizes `data` (whole blocks) into f32.
    pub fn dequantize(self, data: &[u8]) -> Vec<f32> {
        let (per, bytes) = self.block();
        let mut out = vec![0f32; data.len() / bytes * per];
        self.dequantize_into(data, &mut out);
        out
    }

    /// Dequantizes `data` (whole blocks) into `out`, which holds exactly their values: the
    /// same loops compiled for the SIMD level in use ([`crate::qmatmul::simd::level`]), where
    /// they vectorize (the crate's own baseline is SSE2), so a prefill's weight panels decode at
    /// several times the speed.
    pub fn dequantize_into(self, data: &[u8], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::qmatmul::simd::{Simd, level};
            if level() >= Simd::Avx512 {
                // SAFETY: the level says the CPU has these features.
                return unsafe { dequantize_avx512(self, data, out) };
            } else if level() >= Simd::Avx2 {
                // SAFETY: as above.
                return unsafe { dequantize_avx2(self, data, out) };
            }
        }
        self.dequantize_plain(data, out)
    }

    #[inline(always)]
    fn dequantize_plain(self, data: &[u8], out: &mut [f32]) {
        let (per, bytes) = self.block();
        assert_eq!(data.len() / bytes * per, out.len(), "output size");
        for (b, y) in data.chunks_exact(bytes).zip(out.chunks_exact_mut(per)) {
            match self {
                Self::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                Self::F16 => y[0] = f16::from_le_bytes([b[0], b[1]]).to_f32(),
                Self::BF16 => y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32(),
                Self::Q4_0 => q4_0(b, y),
                Self::Q4_1 => q4_1(b, y),
                Self::Q5_0 => q5_0(b, y),
                Self::Q5_1 => q5_1(b, y),
                Self::Q8_0 => q8_0(b, y),
                Self::Q2_K => q2_k(b, y),
                Self::Q3_K => q3_k(b, y),
                Self::Q4_K => q4_k(b, y),
                Self::Q5_K => q5_k(b, y),
                Self::Q6_K => q6_k(b, y),
                Self::IQ4_NL => iq4_nl(b, y),
                Self::IQ4_XS => iq4_xs(b, y),
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn dequantize_avx512(ty: GgmlType, data: &[u8], out: &mut [f32]) {
    ty.dequantize_plain(data, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_avx2(ty: GgmlType, data: &[u8], out: &mut [f32]) {
    ty.dequantize_plain(data, out)
}

/// Writes `values` into `out` in order.
#[inline(always)]
fn put(out: &mut [f32], values: impl Iterator<Item = f32>) {
    out.iter_mut().zip(values).for_each(|(o, v)| *o = v);
}

#[inline(always)]
fn h(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[inline(always)]
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    let qs = &b[2..18];
    put(
        &mut out[..16],
        qs.iter().map(|&q| ((q & 0x0F) as i32 - 8) as f32 * d),
    );
    put(
        &mut out[16..],
        qs.iter().map(|&q| ((q >> 4) as i32 - 8) as f32 * d),
    );
}

#[inline(always)]
fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (h(b, 0), h(b, 2));
    let qs = &b[4..20];
    put(
        &mut out[..16],
        qs.iter().map(|&q| (q & 0x0F) as f32 * d + m),
    );
    put(&mut out[16..], qs.iter().map(|&q| (q >> 4) as f32 * d + m));
}

/// The 32 unsigned 5-bit values of a Q5_0/Q5_1 block, each through `f`: low nibbles from `qs`,
/// fifth bits from `qh` (bit j for value j, bit j + 16 for value j + 16). Plain indexed loops,
/// so that they vectorize.
#[inline(always)]
fn q5_block(qh: u32, qs: &[u8], out: &mut [f32], f: impl Fn(u32) -> f32) {
    let (qs, out): (&[u8; 16], &mut [f32; 32]) = (
        qs.try_into().expect("16 bytes"),
        out.try_into().expect("32 values"),
    );
    for j in 0..16 {
        let lo = (qs[j] as u32 & 0x0F) | (((qh >> j) & 1) << 4);
        let hi = (qs[j] as u32 >> 4) | (((qh >> (j + 16)) & 1) << 4);
        out[j] = f(lo);
        out[j + 16] = f(hi);
    }
}

#[inline(always)]
fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    q5_block(qh, &b[6..22], out, |v| (v as i32 - 16) as f32 * d);
}

#[inline(always)]
fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (h(b, 0), h(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    q5_block(qh, &b[8..24], out, |v| v as f32 * d + m);
}

#[inline(always)]
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    put(out, b[2..34].iter().map(|&q| (q as i8) as f32 * d));
}

#[inline(always)]
fn q2_k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (h(b, 80), h(b, 82));
    // Value 128n + 32j + l: bits 2j.. of qs[32n + l]; its group of 16 is (128n + 32j + l) / 16.
    for (i, y) in out.iter_mut().enumerate() {
        let (n, j, l) = (i / 128, (i / 32) % 4, i % 32);
        let sc = scales[i / 16];
        let q = (qs[32 * n + l] >> (2 * j)) & 3;
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *y = dl * q as f32 - ml;
    }
}

/// The 16 signed 6-bit scales of a Q3_K block (ggml packs them in 12 bytes).
pub fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

#[inline(always)]
fn q3_k(b: &[u8], out: &mut [f32]) {
    let (hmask, qs) = (&b[..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d = h(b, 108);
    for (i, y) in out.iter_mut().enumerate() {
        let (n, j, l) = (i / 128, (i / 32) % 4, i % 32);
        let low = ((qs[32 * n + l] >> (2 * j)) & 3) as i32;
        let high = (hmask[l] >> (4 * n + j)) & 1;
        let q = low - if high == 0 { 4 } else { 0 };
        *y = d * scales[i / 16] as f32 * q as f32;
    }
}

/// 32 values `d · table[code]` from 16 bytes of 4-bit codes (low nibbles first).
#[inline(always)]
fn iq4_block(d: f32, qs: &[u8], out: &mut [f32]) {
    let value = |c: u8| d * IQ4_VALUES[c as usize] as f32;
    put(&mut out[..16], qs.iter().map(|&q| value(q & 0x0F)));
    put(&mut out[16..32], qs.iter().map(|&q| value(q >> 4)));
}

#[inline(always)]
fn iq4_nl(b: &[u8], out: &mut [f32]) {
    iq4_block(h(b, 0), &b[2..18], out);
}

/// The signed 6-bit scale of sub-block `ib` (0..8) of an IQ4_XS block.
pub fn iq4_xs_scale(b: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let high = ((scales_h >> (2 * ib)) & 3) as u8;
    (low | (high << 4)) as i32 - 32
}

#[inline(always)]
fn iq4_xs(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    for (ib, y) in out.chunks_exact_mut(32).enumerate() {
        let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
        iq4_block(d * iq4_xs_scale(b, ib) as f32, qs, y);
    }
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K super-block.
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    if j < 4 {
        ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
    } else {
        let d = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (d as f32, m as f32)
    }
}

#[inline(always)]
fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (h(b, 0), h(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for ((n, q), y) in qs
        .chunks_exact(32)
        .enumerate()
        .zip(out.chunks_exact_mut(64))
    {
        let (sc1, m1) = scale_min_k4(2 * n, scales);
        let (sc2, m2) = scale_min_k4(2 * n + 1, scales);
        let (d1, m1) = (d * sc1, dmin * m1);
        let (d2, m2) = (d * sc2, dmin * m2);
        put(&mut y[..32], q.iter().map(|&x| d1 * (x & 0x0F) as f32 - m1));
        put(&mut y[32..], q.iter().map(|&x| d2 * (x >> 4) as f32 - m2));
    }
}

#[inline(always)]
fn q5_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (h(b, 0), h(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for ((n, ql), y) in qs
        .chunks_exact(32)
        .enumerate()
        .zip(out.chunks_exact_mut(64))
    {
        let (u1, u2) = (1u8 << (2 * n), 2u8 << (2 * n));
        let (sc1, m1) = scale_min_k4(2 * n, scales);
        let (sc2, m2) = scale_min_k4(2 * n + 1, scales);
        let (d1, m1) = (d * sc1, dmin * m1);
        let (d2, m2) = (d * sc2, dmin * m2);
        for l in 0..32 {
            let hi = if qh[l] & u1 != 0 { 16 } else { 0 };
            y[l] = d1 * ((ql[l] & 0x0F) + hi) as f32 - m1;
        }
        for l in 0..32 {
            let hi = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l + 32] = d2 * ((ql[l] >> 4) + hi) as f32 - m2;
        }
    }
}

#[inline(always)]
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = h(b, 208);
    for half in 0..2 {
        let ql = &b[half * 64..half * 64 + 64];
        let qh = &b[128 + half * 32..128 + half * 32 + 32];
        let sc = &b[192 + half * 8..192 + half * 8 + 8];
        let y = &mut y[half * 128..half * 128 + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| d * (sc[is + k] as i8) as f32;
            y[l] = s(0) * q1 as f32;
            y[l + 32] = s(2) * q2 as f32;
            y[l + 64] = s(4) * q3 as f32;
            y[l + 96] = s(6) * q4 as f32;
        }
    }
}
