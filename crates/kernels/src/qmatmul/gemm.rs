//! The products of a prefill (many input rows): each task dequantizes a panel of weight rows
//! once, packs it `[k][NR]`, and runs a register-blocked f32 microkernel over every input row
//! (packed once, `[k][MR]` per block of rows): 14 × 32 with AVX-512, 6 × 16 with AVX2 + FMA.
//! Without either the caller keeps burn's matrix product on dequantized tiles. Exact f32
//! arithmetic: it differs from any other f32 GEMM only in the order of the additions.

#![allow(unsafe_code)]

use std::arch::x86_64::*;
use std::ops::Range;
use std::sync::{Mutex, OnceLock, PoisonError};

use super::{QMatrix, avx2, avx512, team};

/// A microkernel and its block: `mr` input rows against a panel of `nr` weight rows.
#[derive(Clone, Copy)]
struct Micro {
    mr: usize,
    nr: usize,
    /// `(panel [k][nr], inputs [k][mr], k, out [mr][nr])`.
    run: unsafe fn(&[f32], &[f32], usize, &mut [f32]),
}

/// 14 × 2 accumulators of 16 lanes, two weight registers, one broadcast: 31 of 32 registers.
const AVX512: Micro = Micro {
    mr: 14,
    nr: 32,
    run: block512,
};

/// 6 × 2 accumulators of 8 lanes, two weight registers, one broadcast: 15 of 16 registers.
const AVX2: Micro = Micro {
    mr: 6,
    nr: 16,
    run: block256,
};

/// The best microkernel this CPU runs.
fn micro() -> Option<Micro> {
    if avx512::available() {
        Some(AVX512)
    } else if avx2::available() {
        Some(AVX2)
    } else {
        None
    }
}

/// Whether this CPU runs the GEMM.
pub fn available() -> bool {
    micro().is_some()
}

/// `x · Wᵀ` for `t` input rows of `cols` values (`t × rows` values, row-major), or `None`
/// where this CPU has neither AVX-512 nor AVX2.
pub fn gemm(m: &QMatrix, x: &[f32], t: usize) -> Option<Vec<f32>> {
    available().then(|| {
        gemm_with(m.rows, m.cols, x, t, &|rows, dst| {
            let bytes = &m.data[rows.start * m.row_bytes..rows.end * m.row_bytes];
            m.ty.dequantize_into(bytes, dst);
        })
    })
}

/// `x · Wᵀ` for a `[n, k]` matrix `W` whose rows `fill(range, dst)` writes (row-major, f32)
/// into `dst`: `t × n` values.
///
/// # Panics
/// Where [`available`] is false.
pub fn gemm_with(
    n: usize,
    k: usize,
    x: &[f32],
    t: usize,
    fill: &(dyn Fn(Range<usize>, &mut [f32]) + Sync),
) -> Vec<f32> {
    gemm_on(
        micro().expect("the GEMM needs AVX2 or AVX-512"),
        n,
        k,
        x,
        t,
        fill,
    )
}

fn gemm_on(
    micro: Micro,
    n: usize,
    k: usize,
    x: &[f32],
    t: usize,
    fill: &(dyn Fn(Range<usize>, &mut [f32]) + Sync),
) -> Vec<f32> {
    let Micro { mr, nr, run } = micro;
    assert_eq!(x.len(), t * k, "input is not t × k");
    // The input once in blocks of mr rows, each `[k][mr]` (rows past `t` zero), so that the
    // microkernel reads both operands sequentially; packed on the team, a block per task.
    let blocks = t.div_ceil(mr);
    let mut xpack = vec![0f32; blocks * k * mr];
    {
        let slots: Vec<Mutex<&mut [f32]>> = xpack.chunks_mut(k * mr).map(Mutex::new).collect();
        team().run(blocks, &|b| {
            let mut dst = slots[b].lock().unwrap_or_else(PoisonError::into_inner);
            for (r, row) in x[b * mr * k..((b + 1) * mr).min(t) * k]
                .chunks_exact(k)
                .enumerate()
            {
                for (kk, &v) in row.iter().enumerate() {
                    dst[kk * mr + r] = v;
                }
            }
        });
    }
    let panels = n.div_ceil(nr);
    let parts: Vec<OnceLock<Vec<f32>>> = (0..panels).map(|_| OnceLock::new()).collect();
    team().run(panels, &|p| {
        let (r0, r1) = (p * nr, ((p + 1) * nr).min(n));
        let mut w = vec![0f32; (r1 - r0) * k];
        fill(r0..r1, &mut w);
        let mut packed = vec![0f32; k * nr];
        for (j, row) in w.chunks_exact(k).enumerate() {
            for (kk, &v) in row.iter().enumerate() {
                packed[kk * nr + j] = v;
            }
        }
        let mut out = vec![0f32; blocks * mr * nr];
        for (b, o) in out.chunks_exact_mut(mr * nr).enumerate() {
            let xb = &xpack[b * k * mr..(b + 1) * k * mr];
            // SAFETY: `micro()` checked the CPU for this kernel; the slices have the sizes it
            // reads and writes.
            unsafe { run(&packed, xb, k, o) };
        }
        let _ = parts[p].set(out);
    });
    // Rows of the result in parallel too, each task copying its rows out of every panel.
    let mut y = vec![0f32; t * n];
    let per = t.div_ceil(team().threads() * 4).max(1);
    {
        let slots: Vec<Mutex<&mut [f32]>> = y.chunks_mut(per * n).map(Mutex::new).collect();
        team().run(slots.len(), &|c| {
            let mut dst = slots[c].lock().unwrap_or_else(PoisonError::into_inner);
            for (p, part) in parts.iter().enumerate() {
                let part = part.get().expect("every panel ran");
                let (r0, r1) = (p * nr, ((p + 1) * nr).min(n));
                for (i, row) in dst.chunks_exact_mut(n).enumerate() {
                    let from = (c * per + i) * nr;
                    row[r0..r1].copy_from_slice(&part[from..from + r1 - r0]);
                }
            }
        });
    }
    y
}

/// 14 packed input rows (`[k][14]`) against one packed panel (`[k][32]`), accumulated in
/// registers over all of `k`: `out` gets `14 × 32` values.
#[target_feature(enable = "avx512f")]
unsafe fn block512(packed: &[f32], xb: &[f32], k: usize, out: &mut [f32]) {
    const MR: usize = AVX512.mr;
    const NR: usize = AVX512.nr;
    assert!(packed.len() >= k * NR && xb.len() >= k * MR && out.len() >= MR * NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (pp, xp) = (packed.as_ptr(), xb.as_ptr());
    for kk in 0..k {
        // SAFETY: kk < k: the two registers at kk·NR lie inside `packed` and the MR values at
        // kk·MR inside `xb` (checked above).
        unsafe {
            let b0 = _mm512_loadu_ps(pp.add(kk * NR));
            let b1 = _mm512_loadu_ps(pp.add(kk * NR + 16));
            for (r, a) in acc.iter_mut().enumerate() {
                let v = _mm512_set1_ps(*xp.add(kk * MR + r));
                a[0] = _mm512_fmadd_ps(v, b0, a[0]);
                a[1] = _mm512_fmadd_ps(v, b1, a[1]);
            }
        }
    }
    for (a, o) in acc.iter().zip(out.chunks_exact_mut(NR)) {
        // SAFETY: `o` holds NR = 32 values.
        unsafe {
            _mm512_storeu_ps(o.as_mut_ptr(), a[0]);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), a[1]);
        }
    }
}

/// 6 packed input rows (`[k][6]`) against one packed panel (`[k][16]`), as [`block512`].
#[target_feature(enable = "avx2,fma")]
unsafe fn block256(packed: &[f32], xb: &[f32], k: usize, out: &mut [f32]) {
    const MR: usize = AVX2.mr;
    const NR: usize = AVX2.nr;
    assert!(packed.len() >= k * NR && xb.len() >= k * MR && out.len() >= MR * NR);
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let (pp, xp) = (packed.as_ptr(), xb.as_ptr());
    for kk in 0..k {
        // SAFETY: kk < k: the two registers at kk·NR lie inside `packed` and the MR values at
        // kk·MR inside `xb` (checked above).
        unsafe {
            let b0 = _mm256_loadu_ps(pp.add(kk * NR));
            let b1 = _mm256_loadu_ps(pp.add(kk * NR + 8));
            for (r, a) in acc.iter_mut().enumerate() {
                let v = _mm256_set1_ps(*xp.add(kk * MR + r));
                a[0] = _mm256_fmadd_ps(v, b0, a[0]);
                a[1] = _mm256_fmadd_ps(v, b1, a[1]);
            }
        }
    }
    for (a, o) in acc.iter().zip(out.chunks_exact_mut(NR)) {
        // SAFETY: `o` holds NR = 16 values.
        unsafe {
            _mm256_storeu_ps(o.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(o.as_mut_ptr().add(8), a[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both microkernels against the f64 product, on shapes that leave partial blocks and
    /// panels.
    #[test]
    fn each_microkernel_gives_the_product() {
        let (n, k, t) = (45, 70, 31);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 113) as f32 / 50.0 - 1.1)
            .collect();
        let x: Vec<f32> = (0..t * k)
            .map(|i| ((i * 104729) % 97) as f32 / 40.0 - 1.2)
            .collect();
        let fill = |rows: Range<usize>, dst: &mut [f32]| {
            dst.copy_from_slice(&w[rows.start * k..rows.end * k]);
        };
        let mut micros = Vec::new();
        if avx512::available() {
            micros.push(("avx512", AVX512));
        }
        if avx2::available() {
            micros.push(("avx2", AVX2));
        }
        for (name, m) in micros {
            let y = gemm_on(m, n, k, &x, t, &fill);
            for i in 0..t {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|kk| x[i * k + kk] as f64 * w[j * k + kk] as f64)
                        .sum();
                    let got = y[i * n + j] as f64;
                    assert!(
                        (got - want).abs() < 1e-4,
                        "{name} [{i}, {j}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
