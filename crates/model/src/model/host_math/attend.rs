//! Attention of one GQA group over the host cache, as the decode step and short turns run it
//! (a long prefill chunk takes the GEMM in `fused::attention`): the scores of [`KEYS`] keys at a
//! time against each query, the capped softmax over whole rows on the vectorized exp, and the
//! weighted values [`KEYS`] keys at a time. Keys and values are widened to f32 a row at a time
//! (F16C for an f16 cache), once for the whole group. AVX-512 or AVX2 chosen at run time
//! (`qmatmul::simd`), plain loops otherwise.

#![allow(unsafe_code)]

use super::super::kv_cache::Rows;
#[cfg(target_arch = "x86_64")]
use gemma_kernels::qmatmul::simd::{Simd, level};
use gemma_kernels::vmath;

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

/// Keys taken together: each query, and each output row, is read once per `KEYS` keys, and
/// their sums are independent chains rather than one.
const KEYS: usize = 4;

/// f32 lanes each sum is split over (a 512-bit register, two of 256), added as a tree.
const LANES: usize = 16;

// Everything here must inline into the target-feature functions below to be vectorized
// (`#[inline(always)]`; `perf annotate` shows the lanes). A sum over `[[f32; 16]; K]` indexed
// by key ran scalar through the stack: hence `dots4`'s four named accumulators.
#[inline(always)]
fn attend_plain(g: &Group, out: &mut [f32], stats: &mut [(f32, f32)]) {
    let hd = g.dim;
    let heads = g.q.len() / hd;
    let n = g.keys.len();
    out.fill(0.0);
    if n == 0 {
        stats.fill((f32::NEG_INFINITY, 0.0));
        return;
    }
    let mut scores = vec![0f32; heads * n];
    let mut buf = vec![0f32; KEYS * hd];
    let mut i = 0;
    while i < n {
        if n - i >= KEYS {
            let keys = read_rows::<KEYS>(&g.k, g, i, &mut buf);
            score::<KEYS>(g, &keys, i, n, &mut scores);
            i += KEYS;
        } else {
            let keys = read_rows::<1>(&g.k, g, i, &mut buf);
            score::<1>(g, &keys, i, n, &mut scores);
            i += 1;
        }
    }
    for (row, st) in scores.chunks_exact_mut(n).zip(stats.iter_mut()) {
        if let Some(c) = g.softcap {
            vmath::softcap_slice(row, c);
        }
        let max = row_max(row);
        *st = (max, vmath::exp_sub_sum(row, max));
    }
    let mut i = 0;
    while i < n {
        if n - i >= KEYS {
            let values = read_rows::<KEYS>(&g.v, g, i, &mut buf);
            weigh::<KEYS>(&scores, n, i, &values, out, hd);
            i += KEYS;
        } else {
            let values = read_rows::<1>(&g.v, g, i, &mut buf);
            weigh::<1>(&scores, n, i, &values, out, hd);
            i += 1;
        }
    }
}

/// Rows `first..first + K` of the group's visible keys (or values), as f32.
#[inline(always)]
fn read_rows<'b, const K: usize>(
    src: &Rows<'b>,
    g: &Group,
    first: usize,
    buf: &'b mut [f32],
) -> [&'b [f32]; K] {
    let mut room = buf.chunks_exact_mut(g.dim);
    std::array::from_fn(|j| {
        let at = (g.keys.start + first + j) * g.stride + g.offset;
        src.read(at, g.dim, room.next().expect("room for K rows"))
    })
}

/// The scaled scores of `K` (4 or 1) keys from `first` against each query, into
/// `scores[h · n + first + j]`.
#[inline(always)]
fn score<const K: usize>(g: &Group, keys: &[&[f32]; K], first: usize, n: usize, s: &mut [f32]) {
    let hd = g.dim;
    let mut h = 0;
    while h * hd < g.q.len() {
        let q = &g.q[h * hd..(h + 1) * hd];
        let at = h * n + first;
        if let [k0, k1, k2, k3] = keys.as_slice() {
            let d = dots4(q, [k0, k1, k2, k3]);
            for j in 0..4 {
                s[at + j] = d[j] * g.scale;
            }
        } else {
            s[at] = dot1(q, keys[0]) * g.scale;
        }
        h += 1;
    }
}

/// `q · k` for four keys, each over [`LANES`] partial sums: four independent chains that
/// share each load of `q`.
#[inline(always)]
fn dots4(q: &[f32], k: [&[f32]; 4]) -> [f32; 4] {
    let (mut a0, mut a1, mut a2, mut a3) =
        ([0f32; LANES], [0f32; LANES], [0f32; LANES], [0f32; LANES]);
    let qc = q.chunks_exact(LANES);
    let tail = qc.remainder();
    let chunks = qc
        .zip(k[0].chunks_exact(LANES))
        .zip(k[1].chunks_exact(LANES))
        .zip(k[2].chunks_exact(LANES))
        .zip(k[3].chunks_exact(LANES));
    for ((((q, k0), k1), k2), k3) in chunks {
        for l in 0..LANES {
            a0[l] = q[l].mul_add(k0[l], a0[l]);
            a1[l] = q[l].mul_add(k1[l], a1[l]);
            a2[l] = q[l].mul_add(k2[l], a2[l]);
            a3[l] = q[l].mul_add(k3[l], a3[l]);
        }
    }
    let whole = q.len() - tail.len();
    let rest = |kj: &[f32]| {
        let mut t = 0f32;
        for (x, y) in tail.iter().zip(&kj[whole..]) {
            t = x.mul_add(*y, t);
        }
        t
    };
    [
        tree_sum(a0) + rest(k[0]),
        tree_sum(a1) + rest(k[1]),
        tree_sum(a2) + rest(k[2]),
        tree_sum(a3) + rest(k[3]),
    ]
}

/// `q · k` over [`LANES`] partial sums.
#[inline(always)]
fn dot1(q: &[f32], k: &[f32]) -> f32 {
    let mut a = [0f32; LANES];
    let (qc, kc) = (q.chunks_exact(LANES), k.chunks_exact(LANES));
    let mut t = 0f32;
    for (x, y) in qc.remainder().iter().zip(kc.remainder()) {
        t = x.mul_add(*y, t);
    }
    for (x, y) in qc.zip(kc) {
        for l in 0..LANES {
            a[l] = x[l].mul_add(y[l], a[l]);
        }
    }
    tree_sum(a) + t
}

/// The lanes added in halves (a few shuffles), not one after another.
#[inline(always)]
fn tree_sum(mut a: [f32; LANES]) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            a[l] += a[l + w];
        }
        w /= 2;
    }
    a[0]
}

/// The largest value of a row.
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            m[l] = m[l].max(c[l]);
        }
    }
    for &v in chunks.remainder() {
        m[0] = m[0].max(v);
    }
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            m[l] = m[l].max(m[l + w]);
        }
        w /= 2;
    }
    m[0]
}

/// `out[h] += Σ_j p[h][first + j] · values[j]` for each query `h`, the keys added in order.
#[inline(always)]
fn weigh<const K: usize>(
    p: &[f32],
    n: usize,
    first: usize,
    values: &[&[f32]; K],
    out: &mut [f32],
    hd: usize,
) {
    for (h, o) in out.chunks_exact_mut(hd).enumerate() {
        let w = &p[h * n + first..h * n + first + K];
        if let ([v0, v1, v2, v3], [w0, w1, w2, w3]) = (values.as_slice(), w) {
            for ((((o, a), b), c), d) in o.iter_mut().zip(*v0).zip(*v1).zip(*v2).zip(*v3) {
                *o = d.mul_add(*w3, c.mul_add(*w2, b.mul_add(*w1, a.mul_add(*w0, *o))));
            }
        } else {
            for (o, a) in o.iter_mut().zip(values[0]) {
                *o = a.mul_add(w[0], *o);
            }
        }
    }
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

    /// Three queries of head_dim 96 and of 256 over 39 keys (whole runs of four and a tail of
    /// three), in every cache type: against the formula in f64 on the values the cache holds.
    #[test]
    fn every_cache_type_attends_as_the_formula() {
        use crate::model::kv_cache::BlockQ8;
        use half::f16;
        for hd in [96, 256] {
            let (heads, n, stride) = (3, 39, 2 * hd);
            let make = |m: usize| -> Vec<f32> {
                (0..(n + 1) * stride)
                    .map(|i| ((i * m % 97) as f32 * 0.37).sin())
                    .collect()
            };
            let (k, v) = (make(7), make(11));
            let halves = |x: &[f32]| -> Vec<f16> { x.iter().map(|&v| f16::from_f32(v)).collect() };
            let blocks =
                |x: &[f32]| -> Vec<BlockQ8> { x.chunks(32).map(BlockQ8::quantize).collect() };
            let (k16, v16, k8, v8) = (halves(&k), halves(&v), blocks(&k), blocks(&v));
            let q: Vec<f32> = (0..heads * hd)
                .map(|i| (i as f32 * 0.13).cos() * 0.3)
                .collect();
            let caches = [
                ("f32", Rows::F32(&k), Rows::F32(&v)),
                ("f16", Rows::F16(&k16), Rows::F16(&v16)),
                ("q8_0", Rows::Q8(&k8), Rows::Q8(&v8)),
            ];
            for (name, kr, vr) in caches {
                let g = Group {
                    q: &q,
                    dim: hd,
                    k: kr,
                    v: vr,
                    stride,
                    offset: hd,
                    keys: 1..n + 1,
                    scale: 0.2,
                    softcap: Some(2.5),
                };
                let mut got = vec![0f32; heads * hd];
                attend(&g, &mut got);
                for h in 0..heads {
                    let s: Vec<f64> = (1..n + 1)
                        .map(|j| {
                            let d: f64 = (0..hd)
                                .map(|i| q[h * hd + i] as f64 * kr.get(j * stride + hd + i) as f64)
                                .sum();
                            (d * 0.2 / 2.5).tanh() * 2.5
                        })
                        .collect();
                    let z: f64 = s.iter().map(|x| x.exp()).sum();
                    for i in 0..hd {
                        let want: f64 = (1..n + 1)
                            .zip(&s)
                            .map(|(j, x)| x.exp() / z * vr.get(j * stride + hd + i) as f64)
                            .sum();
                        let d = (got[h * hd + i] as f64 - want).abs();
                        assert!(d < 1e-5, "{name} hd {hd} head {h} [{i}]: off by {d}");
                    }
                }
            }
        }
    }
}
