//! The small f32 pieces of the fused host step: RMSNorm over rows, GELU (tanh), rotate-half
//! RoPE, and the dot / scaled-add of attention over the cache, the last two with AVX-512 or
//! AVX2 chosen at run time (the crate is built for any x86-64, whose baseline is SSE2).

#![allow(unsafe_code)]

use super::super::ops::RmsNorm;

/// Normalises each row of `width` values of `x` in place, as [`RmsNorm::forward`] does: the
/// mean square in f32 (accumulated in f64), `x / √(ms + ε) · w`.
pub fn norm_rows(n: &RmsNorm, x: &mut [f32], width: usize) {
    for row in x.chunks_exact_mut(width) {
        let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / width as f64;
        let inv = 1.0 / ((ms as f32) + n.eps as f32).sqrt();
        match &n.host {
            Some(w) => row
                .iter_mut()
                .zip(w.iter())
                .for_each(|(v, w)| *v = *v * inv * w),
            None => row.iter_mut().for_each(|v| *v *= inv),
        }
    }
}

/// GELU with the tanh approximation, as [`super::super::ops::gelu_tanh`]: `x · σ(2z)`.
pub fn gelu_tanh(x: f32) -> f32 {
    const TWO_SQRT_2_OVER_PI: f32 =
        2.0 * std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    let z = x * (1.0 + 0.044715 * x * x) * TWO_SQRT_2_OVER_PI;
    x / (1.0 + (-z).exp())
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
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just checked.
        return unsafe { dot_avx512(a, b) };
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features were just checked.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

/// `y += s·x`.
pub fn axpy(y: &mut [f32], s: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just checked.
        return unsafe { axpy_avx512(y, s, x) };
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features were just checked.
        return unsafe { axpy_avx2(y, s, x) };
    }
    axpy_plain(y, s, x)
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
fn axpy_avx512(y: &mut [f32], s: f32, x: &[f32]) {
    axpy_plain(y, s, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn axpy_avx2(y: &mut [f32], s: f32, x: &[f32]) {
    axpy_plain(y, s, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_and_axpy_match_plain_loops() {
        for n in [1, 15, 16, 17, 256, 259] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - want).abs() < 1e-4, "{n}");
            let mut y = b.clone();
            axpy(&mut y, 0.5, &a);
            for i in 0..n {
                assert!((y[i] - (b[i] + 0.5 * a[i])).abs() < 1e-6);
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
