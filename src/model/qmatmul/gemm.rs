//! The products of a prefill (many input rows) with AVX-512: each task dequantizes a panel of
//! 32 weight rows once, packs it `[k][32]`, and runs a 14 × 32 register-blocked f32
//! microkernel over every input row. Where the CPU lacks AVX-512 the caller keeps burn's
//! matrix product on dequantized tiles (whose kernel is AVX2 at best). Exact f32 arithmetic:
//! it differs from any other f32 GEMM only in the order of the additions.

#![allow(unsafe_code)]

use std::arch::x86_64::*;
use std::ops::Range;
use std::sync::{Mutex, OnceLock, PoisonError};

use super::{QMatrix, avx512, team};

/// Weight rows per panel: two 16-lane registers.
const NR: usize = 32;
/// Input rows per microkernel call: 14 × 2 accumulators, two weight registers, one broadcast.
const MR: usize = 14;

/// Whether this CPU runs the GEMM.
pub fn available() -> bool {
    avx512::available()
}

/// `x · Wᵀ` for `t` input rows of `cols` values (`t × rows` values, row-major), or `None`
/// where this CPU has no AVX-512.
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
/// Where this CPU has no AVX-512 (check [`available`]).
pub fn gemm_with(
    n: usize,
    k: usize,
    x: &[f32],
    t: usize,
    fill: &(dyn Fn(Range<usize>, &mut [f32]) + Sync),
) -> Vec<f32> {
    assert!(available(), "the GEMM needs AVX-512");
    assert_eq!(x.len(), t * k, "input is not t × k");
    // The input once in blocks of MR rows, each `[k][MR]` (rows past `t` zero), so that the
    // microkernel reads both operands sequentially; packed on the team, a block per task.
    let blocks = t.div_ceil(MR);
    let mut xpack = vec![0f32; blocks * k * MR];
    {
        let slots: Vec<Mutex<&mut [f32]>> = xpack.chunks_mut(k * MR).map(Mutex::new).collect();
        team().run(blocks, &|b| {
            let mut dst = slots[b].lock().unwrap_or_else(PoisonError::into_inner);
            for (r, row) in x[b * MR * k..((b + 1) * MR).min(t) * k]
                .chunks_exact(k)
                .enumerate()
            {
                for (kk, &v) in row.iter().enumerate() {
                    dst[kk * MR + r] = v;
                }
            }
        });
    }
    let panels = n.div_ceil(NR);
    let parts: Vec<OnceLock<Vec<f32>>> = (0..panels).map(|_| OnceLock::new()).collect();
    team().run(panels, &|p| {
        let (r0, r1) = (p * NR, ((p + 1) * NR).min(n));
        let mut w = vec![0f32; (r1 - r0) * k];
        fill(r0..r1, &mut w);
        let mut packed = vec![0f32; k * NR];
        for (j, row) in w.chunks_exact(k).enumerate() {
            for (kk, &v) in row.iter().enumerate() {
                packed[kk * NR + j] = v;
            }
        }
        let mut out = vec![0f32; blocks * MR * NR];
        for (b, o) in out.chunks_exact_mut(MR * NR).enumerate() {
            let xb = &xpack[b * k * MR..(b + 1) * k * MR];
            // SAFETY: AVX-512 was checked above; the slices have the sizes `block` reads and
            // writes.
            unsafe { block(&packed, xb, k, o) };
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
                let (r0, r1) = (p * NR, ((p + 1) * NR).min(n));
                for (i, row) in dst.chunks_exact_mut(n).enumerate() {
                    let from = (c * per + i) * NR;
                    row[r0..r1].copy_from_slice(&part[from..from + r1 - r0]);
                }
            }
        });
    }
    y
}

/// MR packed input rows (`[k][MR]`) against one packed panel (`[k][NR]`), accumulated in
/// registers over all of `k`: `out` gets `MR × NR` values.
#[target_feature(enable = "avx512f")]
unsafe fn block(packed: &[f32], xb: &[f32], k: usize, out: &mut [f32]) {
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
