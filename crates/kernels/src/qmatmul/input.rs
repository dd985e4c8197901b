//! One input row of the host products, quantized for the integer kernels ([`QuantRow`]): two
//! i16 digits per value with a scale per 32 values and per 256, and the sums the types' offsets
//! and minimums need.

use super::BLOCK;

/// One input row, as given (for float weights) and quantized (for the block types).
///
/// Each block of 32 values is `d · (q + lo / 32768)`: two i16 digits per value, so that the
/// integer kernels keep about 30 bits of the input (one i16 alone kept 15, and moved the logits
/// of a quantized model by 1e-3 from the exact result). The same values are also held with one
/// scale per 256 ([`QuantRow::q256`]): the super-block types' VNNI kernels sum a whole
/// super-block in integers before one conversion.
#[derive(Debug, Clone)]
pub struct QuantRow {
    /// The values as given.
    pub x: Vec<f32>,
    /// `round(x / d)` per value, zero-padded to whole blocks of [`BLOCK`].
    pub q: Vec<i16>,
    /// `round((x / d − q) · 32768)`: the rounding left over by `q`.
    pub lo: Vec<i16>,
    /// The scale of each block of [`BLOCK`] values: its largest magnitude / 32767.
    pub d: Vec<f32>,
    /// `Σ x / d` over each 16 values (for the types' offsets and minimums).
    pub sum16: Vec<f32>,
    /// The digits with one scale per 256 values ([`SUPER`]), zero-padded to whole 256s.
    pub q256: Vec<i16>,
    /// See [`QuantRow::q256`].
    pub lo256: Vec<i16>,
    /// The scale of each 256 values.
    pub d256: Vec<f32>,
    /// `Σ x / d256` over each 32 values.
    pub sum32: Vec<f32>,
    /// [`QuantRow::q`] with each block's values in the order the AVX2 kernel of Q5_0 widens its
    /// codes ([`LANE_ORDER`]); empty unless a product reads it.
    pub q_lanes: Vec<i16>,
    /// [`QuantRow::lo`] in the same order.
    pub lo_lanes: Vec<i16>,
}

/// Where each of a block's 32 values sits in [`QuantRow::q_lanes`]: values 0–7, 16–23, 8–15,
/// 24–31 (what unpacking a 256-bit vector of codes 0–15 | 16–31 with zero gives, low bytes
/// then high ones, without a shuffle across its two halves).
pub const LANE_ORDER: [usize; BLOCK] = {
    let mut order = [0; BLOCK];
    let mut i = 0;
    while i < BLOCK {
        // Slot i: which eighth (0, 2, 1, 3) and where in it.
        let eighth = [0, 2, 1, 3][i / 8];
        order[i] = eighth * 8 + i % 8;
        i += 1;
    }
    order
};

/// `digits` with each block of [`BLOCK`] in [`LANE_ORDER`].
fn in_lanes(digits: &[i16]) -> Vec<i16> {
    digits
        .chunks_exact(BLOCK)
        .flat_map(|b| LANE_ORDER.iter().map(move |&i| b[i]))
        .collect()
}

/// The weight of one unit of [`QuantRow::lo`].
pub const LO: f32 = 1.0 / 32768.0;

/// Values per super-block of the K and IQ4_XS types.
pub const SUPER: usize = 256;

/// Two i16 digits per value with one scale per `per` values, and the sums of `x / d` over each
/// `sum_every` values: `(q, lo, d, sums)`, zero-padded to whole blocks of `per`.
type Digits = (Vec<i16>, Vec<i16>, Vec<f32>, Vec<f32>);

fn digits(x: &[f32], per: usize, sum_every: usize) -> Digits {
    // At AVX2 and up `round` is an instruction, not a call (SSE2, the baseline, has none).
    best!(
        digits_plain,
        digits_avx512,
        digits_avx2,
        (x, per, sum_every)
    )
}
builds!(digits_plain, digits_avx512, digits_avx2, (x: &[f32], per: usize, sum_every: usize) -> Digits);

#[inline(always)]
fn digits_plain(x: &[f32], per: usize, sum_every: usize) -> Digits {
    let blocks = x.len().div_ceil(per);
    let mut q = vec![0i16; blocks * per];
    let mut lo = vec![0i16; blocks * per];
    let mut d = Vec::with_capacity(blocks);
    let mut sums = vec![0f64; blocks * per / sum_every];
    for (b, xb) in x.chunks(per).enumerate() {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 32767.0;
        let inv = if scale > 0.0 { 1.0 / scale as f64 } else { 0.0 };
        for (i, &xv) in xb.iter().enumerate() {
            let u = xv as f64 * inv;
            let hi = u.round().clamp(-32767.0, 32767.0);
            q[b * per + i] = hi as i16;
            lo[b * per + i] = ((u - hi) * 32768.0).round().clamp(-32767.0, 32767.0) as i16;
            sums[(b * per + i) / sum_every] += u;
        }
        d.push(scale);
    }
    (q, lo, d, sums.into_iter().map(|v| v as f32).collect())
}

impl QuantRow {
    /// Quantizes `x` in both forms; a last partial block is padded with zeros.
    pub fn new(x: &[f32]) -> Self {
        Self::with_forms(x, true, true)
    }

    /// Quantizes `x`, with the per-256 form only when `wide` (a product with a matrix whose
    /// kernels read it: [`reads_super`]) and the digits in lane order only when `lanes`
    /// (`reads_lanes` in `qmatmul`).
    pub(super) fn with_forms(x: &[f32], wide: bool, lanes: bool) -> Self {
        let (q, lo, d, sum16) = digits(x, BLOCK, 16);
        let (q256, lo256, d256, sum32) = if wide {
            digits(x, SUPER, BLOCK)
        } else {
            Default::default()
        };
        let (q_lanes, lo_lanes) = if lanes {
            (in_lanes(&q), in_lanes(&lo))
        } else {
            Default::default()
        };
        Self {
            x: x.to_vec(),
            q_lanes,
            lo_lanes,
            q,
            lo,
            d,
            sum16,
            q256,
            lo256,
            d256,
            sum32,
        }
    }
}
