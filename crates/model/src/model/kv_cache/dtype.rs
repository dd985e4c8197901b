//! The types the host cache may keep keys and values in ([`KvDtype`]: f32, f16, or llama.cpp's
//! q8_0 blocks), and the conversions of single values and blocks to and from f32. Owns no
//! buffer: `host_buf.rs` keeps a layer's values in these types.

use burn::tensor::DType;
use half::f16;

/// Values per q8_0 block.
pub const Q8_BLOCK: usize = 32;

/// Bytes of one q8_0 block as saved: the f16 scale (little-endian), then 32 i8.
pub const Q8_BYTES: usize = 2 + Q8_BLOCK;

pub use gemma_protocol::KvDtype;

/// How the cache lays out a [`KvDtype`] (the type itself is the protocol's: the config and the
/// flags name it too).
pub trait KvLayout: Copy {
    /// The type a layer whose heads are `dim` wide keeps: q8_0 needs whole blocks per head,
    /// so a layer of another width falls back to f16.
    fn for_dim(self, dim: usize) -> KvDtype;
    /// How a layer of head width `dim` in this type is saved: the data's dtype and the width of
    /// its innermost dimension (`[heads, len, width]`; q8_0 as raw blocks of bytes).
    fn stored(self, dim: usize) -> (DType, usize);
    /// Average bytes per value (for estimates).
    fn value_bytes(self) -> f64;
}

impl KvLayout for KvDtype {
    fn for_dim(self, dim: usize) -> KvDtype {
        match self {
            KvDtype::Q8_0 if !dim.is_multiple_of(Q8_BLOCK) => KvDtype::F16,
            t => t,
        }
    }

    fn stored(self, dim: usize) -> (DType, usize) {
        match self.for_dim(dim) {
            KvDtype::F32 => (DType::F32, dim),
            KvDtype::F16 => (DType::F16, dim),
            KvDtype::Q8_0 => (DType::U8, dim / Q8_BLOCK * Q8_BYTES),
        }
    }

    fn value_bytes(self) -> f64 {
        match self {
            KvDtype::F32 => 4.0,
            KvDtype::F16 => 2.0,
            KvDtype::Q8_0 => Q8_BYTES as f64 / Q8_BLOCK as f64,
        }
    }
}

/// 32 values as llama.cpp's `block_q8_0`: `x ≈ d · qs[i]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8 {
    /// The scale, `amax / 127`.
    pub d: f16,
    /// The quantized values.
    pub qs: [i8; Q8_BLOCK],
}

impl BlockQ8 {
    /// Quantizes 32 values as llama.cpp's `quantize_row_q8_0_ref` does.
    pub fn quantize(x: &[f32]) -> Self {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let mut qs = [0i8; Q8_BLOCK];
        for (q, v) in qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
        Self {
            d: f16::from_f32(d),
            qs,
        }
    }

    /// The block as saved: the scale's two bytes (little-endian), then the 32 values.
    pub fn to_bytes(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.d.to_le_bytes());
        out.extend(self.qs.iter().map(|&q| q as u8));
    }

    /// A block from [`BlockQ8::to_bytes`]' 34 bytes.
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut qs = [0i8; Q8_BLOCK];
        for (q, &x) in qs.iter_mut().zip(&b[2..Q8_BYTES]) {
            *q = x as i8;
        }
        Self {
            d: f16::from_le_bytes([b[0], b[1]]),
            qs,
        }
    }
}

/// An f16's value from its bits without a branch or a table, so that a loop of it vectorizes:
/// the exponent and mantissa shifted into an f32 and rebiased by a multiply by 2¹¹² (which
/// also turns the subnormals right), infinities and NaNs patched, the sign put back.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let em = h & 0x7fff;
    let scaled = f32::from_bits(em << 13) * f32::from_bits(0x7780_0000);
    let bits = if em >= 0x7c00 {
        (em << 13) | 0x7f80_0000
    } else {
        scaled.to_bits()
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for &t in <KvDtype as gemma_protocol::Named>::ALL {
            assert_eq!(t.to_string().parse::<KvDtype>(), Ok(t));
        }
        assert_eq!("Q8_0".parse::<KvDtype>(), Ok(KvDtype::Q8_0));
        assert_eq!(KvDtype::default(), KvDtype::F16);
        let err = "q4".parse::<KvDtype>().expect_err("not a type");
        assert!(err.to_string().contains("f32, f16 or q8_0"), "{err}");
    }

    #[test]
    fn the_branchless_widening_matches_half_on_every_f16() {
        for bits in 0..=u16::MAX {
            let want = f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#06x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn q8_0_keeps_each_value_within_half_a_step_and_saves_exactly() {
        let x: Vec<f32> = (0..32).map(|i| (i as f32 * 0.71).sin() * 3.0).collect();
        let b = BlockQ8::quantize(&x);
        let d = b.d.to_f32();
        for (q, v) in b.qs.iter().zip(&x) {
            // d is rounded to f16, so half a step plus the scale's own rounding over 127 steps.
            let bound = d / 2.0 + 127.0 * (d * 2f32.powi(-11));
            assert!((*q as f32 * d - v).abs() <= bound, "{q} {v}");
        }
        let mut bytes = Vec::new();
        b.to_bytes(&mut bytes);
        assert_eq!(bytes.len(), Q8_BYTES);
        assert_eq!(BlockQ8::from_bytes(&bytes), b);
        assert_eq!(BlockQ8::quantize(&[0.0; 32]).qs, [0; 32]);
    }

    #[test]
    fn q8_0_falls_back_to_f16_for_heads_not_a_multiple_of_32() {
        assert_eq!(KvDtype::Q8_0.for_dim(48), KvDtype::F16);
        assert_eq!(KvDtype::Q8_0.for_dim(256), KvDtype::Q8_0);
        assert_eq!(KvDtype::Q8_0.stored(64), (DType::U8, 68));
        assert_eq!(KvDtype::Q8_0.stored(40), (DType::F16, 40));
    }
}
