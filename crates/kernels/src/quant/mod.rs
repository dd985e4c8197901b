//! GGML tensor types and their block layouts, with dequantization to f32. Kept apart from the
//! GGUF container: the model's quantized kernels (`model::qmatmul`) read the same layouts.
//!
//! Layouts follow ggml's `ggml-common.h`; each function turns whole blocks into values in the
//! order ggml's reference `dequantize_row_*` produces them.

mod blocks;
mod sample;
mod split;

use self::blocks::*;
pub use self::blocks::{iq4_xs_scale, q3_k_scales};
pub use self::sample::sample_blocks;
pub use self::split::{Split, SplitKind};

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

    /// Byte offsets of a block's f16 scale (and min) fields; empty for the float types.
    pub fn f16_fields(self) -> &'static [usize] {
        match self {
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 | Self::IQ4_NL | Self::IQ4_XS => &[0],
            Self::Q4_1 | Self::Q5_1 | Self::Q4_K | Self::Q5_K => &[0, 2],
            Self::Q2_K => &[80, 82],
            Self::Q3_K => &[108],
            Self::Q6_K => &[208],
            Self::F32 | Self::F16 | Self::BF16 => &[],
        }
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
        best!(
            dequantize_plain,
            dequantize_avx512,
            dequantize_avx2,
            (self, data, out)
        )
    }

    #[inline(always)]
    fn plain(self, data: &[u8], out: &mut [f32]) {
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

#[inline(always)]
fn dequantize_plain(ty: GgmlType, data: &[u8], out: &mut [f32]) {
    ty.plain(data, out)
}
builds!(dequantize_plain, dequantize_avx512, dequantize_avx2, (ty: GgmlType, data: &[u8], out: &mut [f32]));
