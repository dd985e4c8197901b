//! The products of a prefill (many input rows): each task dequantizes a panel of weight rows
//! once, packs it `[k][NR]`, and runs a register-blocked f32 microkernel over every input row
//! (packed once, `[k][MR]` per block of rows): 14 × 32 with AVX-512, 6 × 16 with AVX2 + FMA.
//! Without either the caller keeps burn's matrix product on dequantized tiles. Exact f32
//! arithmetic: it differs from any other f32 GEMM only in the order of the additions.

#![allow(unsafe_code)]

use std::arch::x86_64::*;
use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use self::pack::pack_panel;
use super::{QMatrix, avx2, avx512, team};

mod pack;

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
    gemm_many(&[m], x, t).map(|mut ys| ys.remove(0))
}

/// [`gemm`] for several matrices of the same input (q/k/v, gate/up): the input is packed once
/// and every matrix's panels share one pass over the team. One `t × rows` result per matrix.
pub fn gemm_many(ms: &[&QMatrix], x: &[f32], t: usize) -> Option<Vec<Vec<f32>>> {
    let micro = micro()?;
    let k = ms.first().map_or(0, |m| m.cols);
    assert!(ms.iter().all(|m| m.cols == k), "matrices differ in columns");
    let fills: Vec<_> = ms
        .iter()
        .map(|&m| move |rows, dst: &mut [f32]| m.dequantize_into(rows, dst))
        .collect();
    let products: Vec<(usize, &Fill<'_>)> = ms
        .iter()
        .zip(&fills)
        .map(|(m, f)| (m.rows, f as &Fill<'_>))
        .collect();
    Some(gemm_on(micro, &products, k, x, t))
}

/// Writes a `[n, k]` matrix's rows `range` (row-major, f32) into `dst`.
pub type Fill<'a> = dyn Fn(Range<usize>, &mut [f32]) + Sync + 'a;

/// `x · Wᵀ` for a `[n, k]` matrix `W` whose rows `fill(range, dst)` writes (row-major, f32)
/// into `dst`: `t × n` values.
///
/// # Panics
/// Where [`available`] is false.
pub fn gemm_with(n: usize, k: usize, x: &[f32], t: usize, fill: &Fill<'_>) -> Vec<f32> {
    let micro = micro().expect("the GEMM needs AVX2 or AVX-512");
    gemm_on(micro, &[(n, fill)], k, x, t).remove(0)
}

/// The largest microkernel's output block, `mr × nr` values.
const TILE: usize = AVX512.mr * AVX512.nr;

/// A task's buffers, kept by each thread of the team between products: a prefill's hundreds
/// of panels would otherwise each map, fault in and unmap fresh pages.
#[derive(Default)]
struct Scratch {
    rows: Vec<f32>,
    packed: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// A `t × n` result that the panels write in disjoint columns from several threads.
struct Columns {
    ptr: *mut f32,
    n: usize,
}

// SAFETY: every task writes only its own panel's columns of each row (see `gemm_on`).
unsafe impl Sync for Columns {}

/// The input packed in blocks of `mr` rows, each `[k][mr]` (rows past `t` zero), so that the
/// microkernel reads both operands sequentially; packed on the team, a block per task.
fn pack_input(x: &[f32], t: usize, k: usize, mr: usize) -> Vec<f32> {
    let blocks = t.div_ceil(mr);
    let mut xpack = vec![0f32; blocks * k * mr];
    let slots: Vec<Mutex<&mut [f32]>> = xpack.chunks_mut(k * mr).map(Mutex::new).collect();
    team().run(blocks, &|b| {
        let mut dst = slots[b].lock().unwrap_or_else(PoisonError::into_inner);
        let rows = &x[b * mr * k..((b + 1) * mr).min(t) * k];
        pack_panel(rows, k, rows.len() / k, mr, &mut dst);
    });
    drop(slots);
    xpack
}

fn gemm_on(
    micro: Micro,
    products: &[(usize, &Fill<'_>)],
    k: usize,
    x: &[f32],
    t: usize,
) -> Vec<Vec<f32>> {
    let Micro { mr, nr, run } = micro;
    assert_eq!(x.len(), t * k, "input is not t × k");
    let xpack = pack_input(x, t, k, mr);
    let mut ys: Vec<Vec<f32>> = products.iter().map(|&(n, _)| vec![0f32; t * n]).collect();
    let outs: Vec<Columns> = products
        .iter()
        .zip(ys.iter_mut())
        .map(|(&(n, _), y)| Columns {
            ptr: y.as_mut_ptr(),
            n,
        })
        .collect();
    // Every panel of every product, in order.
    let panels: Vec<(usize, usize)> = products
        .iter()
        .enumerate()
        .flat_map(|(i, &(n, _))| (0..n.div_ceil(nr)).map(move |p| (i, p)))
        .collect();
    team().run(panels.len(), &|task| {
        let (i, p) = panels[task];
        let (n, fill) = products[i];
        let (r0, r1) = (p * nr, ((p + 1) * nr).min(n));
        SCRATCH.with_borrow_mut(|Scratch { rows, packed }| {
            rows.resize((r1 - r0) * k, 0.0);
            fill(r0..r1, rows);
            let n_rows = r1 - r0;
            packed.resize(k * nr, 0.0);
            if n_rows < nr {
                // Rows past `n` in the last panel are zero.
                packed.fill(0.0);
            }
            pack_panel(rows, k, n_rows, nr, packed);
            let mut tile = [0f32; TILE];
            for b in 0..t.div_ceil(mr) {
                let xb = &xpack[b * k * mr..(b + 1) * k * mr];
                // SAFETY: `micro()` checked the CPU for this kernel; the slices have the sizes
                // it reads and writes (mr · nr ≤ TILE).
                unsafe { run(packed, xb, k, &mut tile[..mr * nr]) };
                let out = &outs[i];
                for (r, row) in tile.chunks_exact(nr).take(t - b * mr).enumerate() {
                    let at = (b * mr + r) * out.n + r0;
                    // SAFETY: row `b·mr + r < t`, columns `r0..r1` of it: inside the `t × n`
                    // result, and only this task writes them.
                    unsafe {
                        std::ptr::copy_nonoverlapping(row.as_ptr(), out.ptr.add(at), r1 - r0)
                    };
                }
            }
        });
    });
    drop(outs);
    ys
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
            let y = gemm_on(m, &[(n, &fill)], k, &x, t).remove(0);
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
