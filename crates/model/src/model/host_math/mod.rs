//! The small f32 pieces of the host path (the fused step, the MoE router): RMSNorm over rows,
//! rotate-half RoPE, and the dot products and weighted sums of attention over the
//! cache (keys and values in any [`KvDtype`](super::kv_cache::KvDtype), widened a row at a time
//! inside the same loops), with AVX-512 or AVX2 chosen at run time (`qmatmul::simd`; the crate
//! is built for any x86-64, whose baseline is SSE2).

#![allow(unsafe_code)]

use super::kv_cache::Rows;
use super::ops::RmsNorm;
#[cfg(target_arch = "x86_64")]
use gemma_kernels::qmatmul::simd::{Simd, level};
use gemma_kernels::vmath;

/// Normalises each row of `width` values of `x` in place, as [`RmsNorm::forward`] does: the
/// mean square in f32 (accumulated in f64), `x / √(ms + ε) · w`.
pub fn norm_rows(n: &RmsNorm, x: &mut [f32], width: usize) {
    let w = n.host.as_deref();
    let eps = n.eps as f32;
    #[cfg(target_arch = "x86_64")]
    if level() >= Simd::Avx512 {
        // SAFETY: the feature was just checked.
        return unsafe { norm_avx512(x, width, w, eps) };
    } else if level() >= Simd::Avx2 {
        // SAFETY: the features were just checked.
        return unsafe { norm_avx2(x, width, w, eps) };
    }
    norm_plain(x, width, w, eps)
}

#[inline(always)]
fn norm_plain(x: &mut [f32], width: usize, w: Option<&[f32]>, eps: f32) {
    for row in x.chunks_exact_mut(width) {
        // Eight partial sums in f64, so that the sum vectorizes.
        let mut acc = [0f64; 8];
        let mut chunks = row.chunks_exact(8);
        for c in &mut chunks {
            for i in 0..8 {
                acc[i] += c[i] as f64 * c[i] as f64;
            }
        }
        let tail: f64 = chunks
            .remainder()
            .iter()
            .map(|&v| v as f64 * v as f64)
            .sum();
        let ms = (acc.iter().sum::<f64>() + tail) / width as f64;
        let inv = 1.0 / ((ms as f32) + eps).sqrt();
        match w {
            Some(w) => {
                for (v, w) in row.iter_mut().zip(w) {
                    *v = *v * inv * w;
                }
            }
            None => {
                for v in row.iter_mut() {
                    *v *= inv;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn norm_avx512(x: &mut [f32], width: usize, w: Option<&[f32]>, eps: f32) {
    norm_plain(x, width, w, eps)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn norm_avx2(x: &mut [f32], width: usize, w: Option<&[f32]>, eps: f32) {
    norm_plain(x, width, w, eps)
}

/// cos and sin of `pos · f` for each inverse frequency (the half table).
pub fn rope_row(inv_freq: &[f32], pos: usize) -> (Vec<f32>, Vec<f32>) {
    let p = pos as f32;
    inv_freq
        .iter()
        .map(|f| ((p * f).cos(), (p * f).sin()))
        .unzip()
}

/// Rotate-half RoPE of one head in place: `x·cos + rotate_half(x)·sin`.
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    let (a, b) = x.split_at_mut(half);
    for i in 0..half {
        let (x1, x2) = (a[i], b[i]);
        a[i] = x1 * cos[i] - x2 * sin[i];
        b[i] = x2 * cos[i] + x1 * sin[i];
    }
}

/// `Σ a·b`.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if level() >= Simd::Avx512 {
        // SAFETY: the feature was just checked.
        return unsafe { dot_avx512(a, b) };
    } else if level() >= Simd::Avx2 {
        // SAFETY: the features were just checked.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

/// The query heads of one KV head (a GQA group) attending over a position-major cache.
#[derive(Clone)]
pub struct Group<'a> {
    /// The group's queries, `heads × dim` values.
    pub q: &'a [f32],
    /// Values per head.
    pub dim: usize,
    /// Keys and values, `stride` values per position.
    pub k: Rows<'a>,
    /// See `k`.
    pub v: Rows<'a>,
    /// Values per position in `k` and `v`.
    pub stride: usize,
    /// Where this KV head starts within a position.
    pub offset: usize,
    /// The visible positions (buffer indices).
    pub keys: std::ops::Range<usize>,
    /// Multiplier on the scores.
    pub scale: f32,
    /// Softcap on the scores.
    pub softcap: Option<f32>,
}

/// `softmax(q·kᵀ · scale, capped) · v` over the visible keys for each query of the group, into
/// `out` (`heads × dim` values). Each key and value is read once for the whole group; the
/// SIMD level is chosen once per group, not per key.
pub fn attend(g: &Group, out: &mut [f32]) {
    let mut stats = vec![(0f32, 0f32); g.q.len() / g.dim];
    attend_part(g, out, &mut stats);
    for (o, &(_, sum)) in out.chunks_exact_mut(g.dim).zip(&stats) {
        o.iter_mut().for_each(|v| *v /= sum);
    }
}

/// [`attend`] over a part of the keys, unnormalised: `out` gets `Σ exp(s − max)·v` and
/// `stats` each head's `(max, Σ exp(s − max))`, so that parts over disjoint keys can be joined
/// ([`join_parts`]).
pub fn attend_part(g: &Group, out: &mut [f32], stats: &mut [(f32, f32)]) {
    #[cfg(target_arch = "x86_64")]
    if level() >= Simd::Avx512 {
        // SAFETY: the feature was just checked.
        return unsafe { attend_avx512(g, out, stats) };
    } else if level() >= Simd::Avx2 {
        // SAFETY: the features were just checked.
        return unsafe { attend_avx2(g, out, stats) };
    }
    attend_plain(g, out, stats)
}

/// One part's result: the unnormalised outputs and each head's `(max, Σ exp(s − max))`.
pub type Part = (Vec<f32>, Vec<(f32, f32)>);

/// Joins [`attend_part`]'s results for disjoint key ranges of one group into the normalised
/// output (`heads × dim` values).
pub fn join_parts(parts: &[Part], dim: usize, out: &mut [f32]) {
    out.fill(0.0);
    for (h, o) in out.chunks_exact_mut(dim).enumerate() {
        let max = parts
            .iter()
            .map(|(_, s)| s[h].0)
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for (po, ps) in parts {
            let w = (ps[h].0 - max).exp();
            sum += ps[h].1 * w;
            o.iter_mut()
                .zip(&po[h * dim..(h + 1) * dim])
                .for_each(|(a, b)| *a += b * w);
        }
        o.iter_mut().for_each(|v| *v /= sum);
    }
}

// Plain loops only (no iterator adapters that the compiler may outline): everything here must
// inline into the target-feature functions below to be vectorized.
#[inline(always)]
fn attend_plain(g: &Group, out: &mut [f32], stats: &mut [(f32, f32)]) {
    let hd = g.dim;
    let heads = g.q.len() / hd;
    let n = g.keys.len();
    let mut scores = vec![0f32; heads * n];
    // A key or value row widened to f32 (unused for an f32 cache), read once for the group.
    let mut row = vec![0f32; hd];
    let mut i = 0;
    while i < n {
        let at = (g.keys.start + i) * g.stride + g.offset;
        let key = g.k.read(at, hd, &mut row);
        let mut h = 0;
        while h < heads {
            let s = dot_lanes(&g.q[h * hd..(h + 1) * hd], key) * g.scale;
            scores[h * n + i] = match g.softcap {
                Some(c) => vmath::softcap(s, c),
                None => s,
            };
            h += 1;
        }
        i += 1;
    }
    let mut h = 0;
    while h < heads {
        let row = &mut scores[h * n..(h + 1) * n];
        let mut max = f32::NEG_INFINITY;
        for &s in row.iter() {
            max = max.max(s);
        }
        let mut sum = 0f32;
        for s in row.iter_mut() {
            *s = vmath::exp(*s - max);
            sum += *s;
        }
        stats[h] = (max, sum);
        h += 1;
    }
    out.fill(0.0);
    let mut i = 0;
    while i < n {
        let at = (g.keys.start + i) * g.stride + g.offset;
        let value = g.v.read(at, hd, &mut row);
        let mut h = 0;
        while h < heads {
            axpy_plain(&mut out[h * hd..(h + 1) * hd], scores[h * n + i], value);
            h += 1;
        }
        i += 1;
    }
}

/// Sixteen independent sums, so that the compiler may keep them in vector lanes.
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn axpy_plain(y: &mut [f32], s: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x.mul_add(s, *y);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn attend_avx512(g: &Group, out: &mut [f32], stats: &mut [(f32, f32)]) {
    attend_plain(g, out, stats)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_avx2(g: &Group, out: &mut [f32], stats: &mut [(f32, f32)]) {
    attend_plain(g, out, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_plain_loop() {
        for n in [1, 15, 16, 17, 256, 259] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - want).abs() < 1e-4, "{n}");
        }
    }

    /// Two KV heads of head_dim 3 over five positions; the second KV head's group of two
    /// queries, keys 1..4, capped: against the formula in f64.
    #[test]
    fn a_group_attends_to_its_visible_keys_only() {
        let (stride, hd) = (6, 3);
        let k: Vec<f32> = (0..5 * stride).map(|i| (i as f32 * 0.7).sin()).collect();
        let v: Vec<f32> = (0..5 * stride).map(|i| (i as f32 * 0.3).cos()).collect();
        let q = [0.5f32, -1.0, 2.0, 1.5, 0.25, -0.75];
        let group = Group {
            q: &q,
            dim: hd,
            k: Rows::F32(&k),
            v: Rows::F32(&v),
            stride,
            offset: hd,
            keys: 1..4,
            scale: 0.8,
            softcap: Some(1.5),
        };
        let mut got = [0f32; 6];
        attend(&group, &mut got);
        // The same in two parts over keys 1..2 and 2..4, joined.
        let parts: Vec<Part> = [1..2, 2..4]
            .into_iter()
            .map(|keys| {
                let (mut o, mut s) = (vec![0f32; 6], vec![(0f32, 0f32); 2]);
                attend_part(&Group { keys, ..group }, &mut o, &mut s);
                (o, s)
            })
            .collect();
        let mut joined = [0f32; 6];
        join_parts(&parts, hd, &mut joined);
        for (a, b) in got.iter().zip(&joined) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        for h in 0..2 {
            let qh = &q[h * hd..(h + 1) * hd];
            let s: Vec<f64> = (1..4)
                .map(|j| {
                    let d: f64 = (0..hd)
                        .map(|i| qh[i] as f64 * k[j * stride + hd + i] as f64)
                        .sum();
                    (d * 0.8 / 1.5).tanh() * 1.5
                })
                .collect();
            let z: f64 = s.iter().map(|x| x.exp()).sum();
            for i in 0..hd {
                let want: f64 = (1..4)
                    .zip(&s)
                    .map(|(j, x)| x.exp() / z * v[j * stride + hd + i] as f64)
                    .sum();
                let g = got[h * hd + i] as f64;
                assert!((g - want).abs() < 1e-6, "{h} {i}: {g} vs {want}");
            }
        }
    }

    #[test]
    fn rope_rotates_pairs_of_the_two_halves() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        let (c, s) = rope_row(&[1.0, 0.0], 1);
        rope(&mut x, &c, &s);
        let (c1, s1) = (1f32.cos(), 1f32.sin());
        assert!((x[0] - (c1 - 3.0 * s1)).abs() < 1e-6);
        assert!((x[2] - (3.0 * c1 + s1)).abs() < 1e-6);
        assert_eq!((x[1], x[3]), (2.0, 4.0));
    }
}
