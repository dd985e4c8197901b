//! The kernels against the dequantized reference, and the SIMD path against the scalar one, on
//! random blocks of every supported type.

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

const TYPES: [GgmlType; 4] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Random blocks with sane f16 scales (random bytes elsewhere cover every code).
fn random_matrix(ty: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> QMatrix {
    let (per, bytes) = ty.block();
    let n = rows * cols / per;
    let mut data = vec![0u8; n * bytes];
    rng.fill(&mut data[..]);
    let scale = |rng: &mut StdRng| f16::from_f32(rng.random_range(0.001..0.05)).to_le_bytes();
    for blk in data.chunks_exact_mut(bytes) {
        match ty {
            GgmlType::Q8_0 | GgmlType::Q5_0 => blk[0..2].copy_from_slice(&scale(rng)),
            GgmlType::Q4_K => {
                blk[0..2].copy_from_slice(&scale(rng));
                blk[2..4].copy_from_slice(&scale(rng));
            }
            GgmlType::Q6_K => blk[208..210].copy_from_slice(&scale(rng)),
            _ => unreachable!(),
        }
    }
    QMatrix::new(ty, rows, cols, data).expect("whole blocks")
}

/// Inputs with blocks of very different magnitudes, one block all zeros.
fn random_input(len: usize, rng: &mut StdRng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
    for (b, blk) in x.chunks_exact_mut(BLOCK).enumerate() {
        let gain = [1.0, 30.0, 0.01, 0.0, 3.0][b % 5];
        blk.iter_mut().for_each(|v| *v *= gain);
    }
    x
}

#[test]
fn products_match_the_dequantized_weights() {
    let mut rng = StdRng::seed_from_u64(7);
    // 768 columns are whole super-blocks; 352 (11 blocks) leaves a block over for the types
    // that step two blocks at a time.
    let shapes = TYPES
        .into_iter()
        .map(|ty| (ty, 37, 768))
        .chain([(GgmlType::Q8_0, 9, 352), (GgmlType::Q5_0, 9, 352)]);
    for (ty, rows, cols) in shapes {
        let m = random_matrix(ty, rows, cols, &mut rng);
        let w = m.dequantize_range(0..rows);
        for t in [1, 3] {
            let x = random_input(t * cols, &mut rng);
            let got = m.matmul(&x, t);
            assert_eq!(got.len(), t * rows);
            for ti in 0..t {
                let xr = &x[ti * cols..(ti + 1) * cols];
                for r in 0..rows {
                    let wr = &w[r * cols..(r + 1) * cols];
                    let want: f64 = wr.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let mag: f64 = wr.iter().zip(xr).map(|(&a, &b)| (a * b).abs() as f64).sum();
                    let g = got[ti * rows + r] as f64;
                    assert!(
                        (g - want).abs() <= 1e-4 * mag + 1e-6,
                        "{ty:?} row {r} input {ti}: {g} vs {want} (scale {mag})"
                    );
                }
            }
        }
    }
}

#[test]
fn the_simd_kernels_agree_with_the_scalar_reference() {
    #[cfg(target_arch = "x86_64")]
    {
        if !avx2::available() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(11);
        for ty in TYPES {
            let m = random_matrix(ty, 5, 512, &mut rng);
            let x = QuantRow::new(&random_input(512, &mut rng));
            for r in 0..5 {
                let (s, v) = (scalar::dot(ty, m.row(r), &x), avx2::dot(ty, m.row(r), &x));
                assert!(
                    (s - v).abs() <= 1e-5 * s.abs().max(1.0),
                    "{ty:?} row {r}: scalar {s} vs simd {v}"
                );
            }
        }
    }
}

#[test]
fn row_lookups_and_ranges_dequantize_like_the_loader() {
    let mut rng = StdRng::seed_from_u64(3);
    for ty in TYPES {
        let m = random_matrix(ty, 40, 256, &mut rng);
        let all = ty.dequantize(&m.data);
        assert_eq!(m.dequantize_range(0..40), all);
        assert_eq!(m.dequantize_range(17..23), all[17 * 256..23 * 256]);
        let rows = m.dequantize_rows(&[3, 39, 3]);
        assert_eq!(rows[..256], all[3 * 256..4 * 256]);
        assert_eq!(rows[256..512], all[39 * 256..40 * 256]);
        assert_eq!(rows[512..], all[3 * 256..4 * 256]);
    }
}

#[test]
fn inputs_quantize_per_block_with_their_sums() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.5).collect();
    let q = QuantRow::new(&x);
    assert_eq!(q.d.len(), 2);
    assert_eq!(q.sum16.len(), 4);
    for (i, &v) in x.iter().enumerate() {
        let back = q.q[i] as f32 * q.d[i / BLOCK];
        assert!(
            (back - v).abs() <= q.d[i / BLOCK] * 0.5 + 1e-6,
            "{i}: {back} vs {v}"
        );
    }
    assert_eq!(
        q.sum16[1],
        q.q[16..32].iter().map(|&v| v as i32).sum::<i32>()
    );
    let zeros = QuantRow::new(&[0.0; 32]);
    assert_eq!((zeros.d[0], zeros.sum16[0]), (0.0, 0));
}

#[test]
fn unsupported_types_and_ragged_sizes_are_refused() {
    assert!(QMatrix::new(GgmlType::Q4_0, 1, 32, vec![0; 18]).is_none());
    assert!(QMatrix::new(GgmlType::Q8_0, 1, 32, vec![0; 33]).is_none());
    assert!(QMatrix::new(GgmlType::Q4_K, 1, 128, vec![0; 72]).is_none());
    assert!(QMatrix::new(GgmlType::Q8_0, 2, 32, vec![0; 68]).is_some());
}
