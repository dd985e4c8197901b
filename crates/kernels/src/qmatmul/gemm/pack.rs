//! Packing for the GEMM: rows of a weight panel, or a block of input rows, transposed into
//! the `[k][nr]` layout the microkernels read, eight rows by eight columns at a time in AVX2
//! registers where whole groups allow, the rest by a scalar loop.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

/// Values of `k` per tile of [`pack_panel`]'s transposition: its reads and writes stay in L1.
const PACK_TILE: usize = 64;

/// `packed[kk · nr + j] = rows[j · k + kk]` for `n_rows` rows of `k` values (a weight panel, or
/// a block of input rows with `nr` = mr), in tiles of [`PACK_TILE`] columns: each row read in
/// order, the writes inside a few kilobytes.
pub(super) fn pack_panel(rows: &[f32], k: usize, n_rows: usize, nr: usize, packed: &mut [f32]) {
    assert!(rows.len() >= n_rows * k && packed.len() >= k * nr && n_rows <= nr);
    assert!(super::available(), "the GEMM's packing needs AVX2");
    // Whole groups of eight rows and eight columns go through 8 × 8 transpositions in
    // registers (AVX2, which the GEMM needs anyway): a tenth of the scalar loop's loads and stores.
    let (groups, k8) = (n_rows / 8, k / 8 * 8);
    for kt in (0..k).step_by(PACK_TILE) {
        let ke = (kt + PACK_TILE).min(k);
        for g in 0..groups {
            for kk in (kt..ke.min(k8)).step_by(8) {
                // SAFETY: the CPU has AVX2 (checked above); rows
                // `8g..8g + 8 ≤ n_rows` and columns `kk..kk + 8 ≤ k` of `rows`, and rows
                // `kk..kk + 8` of `packed` at columns `8g..8g + 8 ≤ nr`: inside both (checked
                // above).
                unsafe { transpose8(rows, k, 8 * g, kk, packed, nr) };
            }
        }
        let done = if groups > 0 { ke.min(k8).max(kt) } else { kt };
        for (j, row) in rows.chunks_exact(k).take(n_rows).enumerate() {
            // The columns the transpositions covered, for their rows.
            let from = if j < groups * 8 { done } else { kt };
            for (i, &v) in row[from..ke].iter().enumerate() {
                packed[(from + i) * nr + j] = v;
            }
        }
    }
}

/// `packed[(kk + i) · nr + j0 + j] = rows[(j0 + j) · k + kk + i]` for `i, j < 8`, in registers.
#[target_feature(enable = "avx2")]
unsafe fn transpose8(rows: &[f32], k: usize, j0: usize, kk: usize, packed: &mut [f32], nr: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        let r = |j: usize| _mm256_loadu_ps(rows.as_ptr().add((j0 + j) * k + kk));
        let (a0, a1, a2, a3) = (r(0), r(1), r(2), r(3));
        let (a4, a5, a6, a7) = (r(4), r(5), r(6), r(7));
        // Pairs of rows interleaved, then quadruples, then the 128-bit halves exchanged.
        let (t0, t1) = (_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
        let (t2, t3) = (_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
        let (t4, t5) = (_mm256_unpacklo_ps(a4, a5), _mm256_unpackhi_ps(a4, a5));
        let (t6, t7) = (_mm256_unpacklo_ps(a6, a7), _mm256_unpackhi_ps(a6, a7));
        let (u0, u1) = (
            _mm256_shuffle_ps::<0x44>(t0, t2),
            _mm256_shuffle_ps::<0xEE>(t0, t2),
        );
        let (u2, u3) = (
            _mm256_shuffle_ps::<0x44>(t1, t3),
            _mm256_shuffle_ps::<0xEE>(t1, t3),
        );
        let (u4, u5) = (
            _mm256_shuffle_ps::<0x44>(t4, t6),
            _mm256_shuffle_ps::<0xEE>(t4, t6),
        );
        let (u6, u7) = (
            _mm256_shuffle_ps::<0x44>(t5, t7),
            _mm256_shuffle_ps::<0xEE>(t5, t7),
        );
        let out = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (i, v) in out.into_iter().enumerate() {
            _mm256_storeu_ps(packed.as_mut_ptr().add((kk + i) * nr + j0), v);
        }
    }
}

/// The scalar packing [`pack_panel`] replaced, kept as its reference.
#[cfg(test)]
fn pack_panel_scalar(rows: &[f32], k: usize, n_rows: usize, nr: usize, packed: &mut [f32]) {
    for kt in (0..k).step_by(PACK_TILE) {
        let ke = (kt + PACK_TILE).min(k);
        for (j, row) in rows.chunks_exact(k).take(n_rows).enumerate() {
            for (i, &v) in row[kt..ke].iter().enumerate() {
                packed[(kt + i) * nr + j] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transposing packer against the scalar one, for panels of whole and partial groups
    /// of eight rows and widths that leave columns over.
    #[test]
    fn packing_in_registers_gives_the_scalar_layout() {
        if !super::super::available() {
            return;
        }
        for (n_rows, nr) in [(32, 32), (27, 32), (16, 16), (5, 16), (14, 14), (6, 6)] {
            for k in [8, 64, 70, 200, 640] {
                let rows: Vec<f32> = (0..n_rows * k).map(|i| i as f32).collect();
                let (mut fast, mut slow) = (vec![-1f32; k * nr], vec![-1f32; k * nr]);
                pack_panel(&rows, k, n_rows, nr, &mut fast);
                pack_panel_scalar(&rows, k, n_rows, nr, &mut slow);
                assert_eq!(fast, slow, "{n_rows} rows of {k} into {nr}");
            }
        }
    }
}
