//! The small f32 pieces of the host path (the fused step, the MoE router): RMSNorm over rows,
//! rotate-half RoPE, dot products, and (`attend.rs`) attention over the cache (keys and values
//! in any [`KvDtype`](super::kv_cache::KvDtype)), with AVX-512 or AVX2 chosen at run time
//! (`qmatmul::simd`; the crate is built for any x86-64, whose baseline is SSE2).

#![allow(unsafe_code)]

mod attend;

pub use self::attend::{Group, Part, attend, attend_part, join_parts};

use super::ops::RmsNorm;
#[cfg(target_arch = "x86_64")]
use gemma_kernels::qmatmul::simd::{Simd, level};

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
