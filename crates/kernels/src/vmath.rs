//! exp, tanh and GELU over slices of f32 (and f16 widened to f32), vectorized at the SIMD level in use
//! ([`crate::qmatmul::simd::level`]): what softmax, softcaps and GeGLU spend their time on once the
//! products are fast. A prefill of 512 tokens on the demo model computed about 40 million
//! exponentials one libm call at a time; here the same loops compile to AVX-512 or AVX2 lanes.
//!
//! [`exp`] is Cephes' `expf`: `2ⁿ · p(r)` with `n = round(x / ln 2)`, `r = x − n ln 2` in two
//! parts and a degree-7 polynomial; within 2 ulp of the true value on `[−87.3, 88]` (the test
//! holds it to 3e-7 relative). Inputs are clamped to that range, so `exp` of a very negative
//! number is about 1e-38, not 0, and nothing overflows.

#![allow(unsafe_code)]

/// `eˣ`, see the module header. Plain arithmetic only, so that it inlines into the vectorized
/// loops below (and callers' own target-feature loops).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in a part with few bits (n · LN2_HI is exact) and the rest.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2²³: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `c · tanh(x / c)`: a softcap. Through [`exp`] of `−2|x|/c`, which never overflows.
#[inline(always)]
pub fn softcap(x: f32, c: f32) -> f32 {
    let e = exp(-2.0 * (x / c).abs());
    let t = (1.0 - e) / (1.0 + e);
    c * if x < 0.0 { -t } else { t }
}

/// GELU with the tanh approximation, `x · σ(2z)` with `z = √(2/π)(x + 0.044715x³)`.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const TWO_SQRT_2_OVER_PI: f32 =
        2.0 * std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    let z = x * (1.0 + 0.044715 * x * x) * TWO_SQRT_2_OVER_PI;
    x / (1.0 + exp(-z))
}

/// `x ← eˣ⁻ᵐ` for each value, returning their sum: a softmax's numerators.
pub fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    best!(exp_sub_plain, exp_sub_avx512, exp_sub_avx2, (x, m))
}

#[inline(always)]
fn exp_sub_plain(x: &mut [f32], m: f32) -> f32 {
    // Sixteen partial sums, so that the additions vectorize too.
    let mut acc = [0f32; 16];
    let mut chunks = x.chunks_exact_mut(16);
    for c in &mut chunks {
        for i in 0..16 {
            c[i] = exp(c[i] - m);
            acc[i] += c[i];
        }
    }
    let mut s = 0f32;
    for v in chunks.into_remainder() {
        *v = exp(*v - m);
        s += *v;
    }
    acc.iter().sum::<f32>() + s
}
builds!(exp_sub_plain, exp_sub_avx512, exp_sub_avx2, (x: &mut [f32], m: f32) -> f32);

/// `dst ← src` for f16 bit patterns widened to f32: F16C's conversion (eight values an
/// instruction, exact) at the AVX2 level and up, `half`'s otherwise.
pub fn widen_f16(src: &[u16], dst: &mut [f32]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "source and destination differ in length"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::qmatmul::simd::level() >= crate::qmatmul::simd::Simd::Avx2 {
        // SAFETY: the level includes AVX2 and F16C.
        return unsafe { widen_f16c(src, dst) };
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = half::f16::from_bits(s).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
fn widen_f16c(src: &[u16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: values i..i + 8 lie inside both slices.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = half::f16::from_bits(src[j]).to_f32();
    }
}

/// `x ← c · tanh(x / c)` for each value.
pub fn softcap_slice(x: &mut [f32], c: f32) {
    best!(softcap_plain, softcap_avx512, softcap_avx2, (x, c))
}

#[inline(always)]
fn softcap_plain(x: &mut [f32], c: f32) {
    for v in x.iter_mut() {
        *v = softcap(*v, c);
    }
}
builds!(softcap_plain, softcap_avx512, softcap_avx2, (x: &mut [f32], c: f32));

/// `g ← gelu_tanh(g) · u` for each pair: GeGLU.
pub fn geglu(g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "gate and up differ in length");
    best!(geglu_plain, geglu_avx512, geglu_avx2, (g, u))
}

#[inline(always)]
fn geglu_plain(g: &mut [f32], u: &[f32]) {
    for (g, u) in g.iter_mut().zip(u) {
        *g = gelu_tanh(*g) * u;
    }
}
builds!(geglu_plain, geglu_avx512, geglu_avx2, (g: &mut [f32], u: &[f32]));

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 bit pattern, subnormals, infinities and NaNs included, in a slice whose
    /// length leaves a tail after the runs of eight.
    #[test]
    fn widening_f16_gives_halfs_values() {
        let src: Vec<u16> = (0..=u16::MAX).chain([0x3c00, 0x8001, 0x7c00]).collect();
        let mut dst = vec![0f32; src.len()];
        widen_f16(&src, &mut dst);
        for (&b, &got) in src.iter().zip(&dst) {
            let want = half::f16::from_bits(b).to_f32();
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:#06x}: {got} vs {want}"
            );
        }
    }

    fn grid() -> Vec<f32> {
        (-20_000..=20_000).map(|i| i as f32 * 0.0042).collect()
    }

    #[test]
    fn exp_is_within_a_few_ulp() {
        let mut worst = 0f64;
        for x in grid().into_iter().chain([-87.0, -60.5, 40.25, 87.9]) {
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert!(exp(-1000.0) < 1e-37 && exp(-1000.0) >= 0.0);
        assert!(exp(1000.0).is_finite());
    }

    /// Each loop's builds this CPU runs: plain, AVX2, AVX-512.
    type Builds<F> = Vec<(&'static str, F)>;

    fn builds<F>(plain: F, avx2: F, avx512: F) -> Builds<F> {
        let mut out = vec![("plain", plain)];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                out.push(("avx2", avx2));
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                out.push(("avx512", avx512));
            }
        }
        out
    }

    #[test]
    fn the_slices_match_the_formulas_at_every_level() {
        let xs = grid();
        type Exp = fn(&mut [f32], f32) -> f32;
        type Cap = fn(&mut [f32], f32);
        type Glu = fn(&mut [f32], &[f32]);
        // SAFETY (the closures below): `builds` keeps a build only where the CPU has its
        // features.
        let exps: Builds<Exp> = builds(
            exp_sub_plain,
            |x, m| unsafe { exp_sub_avx2(x, m) },
            |x, m| unsafe { exp_sub_avx512(x, m) },
        );
        for (name, f) in exps {
            let mut e = xs.clone();
            let sum = f(&mut e, 3.0);
            let mut want_sum = 0f64;
            for (x, got) in xs.iter().zip(&e) {
                // The argument as the loop rounds it, in f32.
                let want = ((*x - 3.0) as f64).exp();
                want_sum += want;
                assert!(
                    ((*got as f64 - want) / want).abs() < 3e-7,
                    "{name}: exp({x} - 3)"
                );
            }
            assert!(((sum as f64 - want_sum) / want_sum).abs() < 1e-5, "{name}");
        }
        let caps: Builds<Cap> = builds(
            softcap_plain,
            |x, c| unsafe { softcap_avx2(x, c) },
            |x, c| unsafe { softcap_avx512(x, c) },
        );
        for (name, f) in caps {
            let mut s = xs.clone();
            f(&mut s, 30.0);
            for (x, got) in xs.iter().zip(&s) {
                let want = 30.0 * (*x as f64 / 30.0).tanh();
                assert!((*got as f64 - want).abs() < 4e-6, "{name}: softcap({x})");
            }
        }
        let u: Vec<f32> = xs.iter().map(|x| 1.0 + x.sin()).collect();
        let glus: Builds<Glu> = builds(
            geglu_plain,
            |g, u| unsafe { geglu_avx2(g, u) },
            |g, u| unsafe { geglu_avx512(g, u) },
        );
        for (name, f) in glus {
            let mut g = xs.clone();
            f(&mut g, &u);
            for ((x, u), got) in xs.iter().zip(&u).zip(&g) {
                let x = *x as f64;
                let z = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                let want = 0.5 * x * (1.0 + z.tanh()) * *u as f64;
                assert!(
                    (*got as f64 - want).abs() < 2e-6 * (1.0 + want.abs()),
                    "{name}: gelu({x})"
                );
            }
        }
        // The public entry points run the CPU's level.
        let mut e = xs.clone();
        assert!(exp_sub_sum(&mut e, 0.0) > 0.0);
    }
}
