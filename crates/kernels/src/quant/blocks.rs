//! The decoders of GGML's blocks, one function per type: whole blocks in, their values out in
//! the order ggml's reference `dequantize_row_*` produces them. Each is inlined into
//! [`super::GgmlType::dequantize_into`]'s builds per SIMD level, where the loops vectorize.

use half::f16;

use super::IQ4_VALUES;

/// Writes `values` into `out` in order.
#[inline(always)]
pub(super) fn put(out: &mut [f32], values: impl Iterator<Item = f32>) {
    out.iter_mut().zip(values).for_each(|(o, v)| *o = v);
}

#[inline(always)]
pub(super) fn h(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[inline(always)]
pub(super) fn q4_0(b: &[u8], out: &mut [f32]) {
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
pub(super) fn q4_1(b: &[u8], out: &mut [f32]) {
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
pub(super) fn q5_block(qh: u32, qs: &[u8], out: &mut [f32], f: impl Fn(u32) -> f32) {
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
pub(super) fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    q5_block(qh, &b[6..22], out, |v| (v as i32 - 16) as f32 * d);
}

#[inline(always)]
pub(super) fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (h(b, 0), h(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    q5_block(qh, &b[8..24], out, |v| v as f32 * d + m);
}

#[inline(always)]
pub(super) fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    put(out, b[2..34].iter().map(|&q| (q as i8) as f32 * d));
}

#[inline(always)]
pub(super) fn q2_k(b: &[u8], out: &mut [f32]) {
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
pub(super) fn q3_k(b: &[u8], out: &mut [f32]) {
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
pub(super) fn iq4_block(d: f32, qs: &[u8], out: &mut [f32]) {
    let value = |c: u8| d * IQ4_VALUES[c as usize] as f32;
    put(&mut out[..16], qs.iter().map(|&q| value(q & 0x0F)));
    put(&mut out[16..32], qs.iter().map(|&q| value(q >> 4)));
}

#[inline(always)]
pub(super) fn iq4_nl(b: &[u8], out: &mut [f32]) {
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
pub(super) fn iq4_xs(b: &[u8], out: &mut [f32]) {
    let d = h(b, 0);
    for (ib, y) in out.chunks_exact_mut(32).enumerate() {
        let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
        iq4_block(d * iq4_xs_scale(b, ib) as f32, qs, y);
    }
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K super-block.
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    if j < 4 {
        ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
    } else {
        let d = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (d as f32, m as f32)
    }
}

#[inline(always)]
pub(super) fn q4_k(b: &[u8], out: &mut [f32]) {
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
pub(super) fn q5_k(b: &[u8], out: &mut [f32]) {
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
pub(super) fn q6_k(b: &[u8], y: &mut [f32]) {
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
