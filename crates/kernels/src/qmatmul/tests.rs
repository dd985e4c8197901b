//! Every type's kernels against the f64 dot product of the dequantized weights, and the SIMD
//! path against the scalar one, on random blocks and on the extremes (every code at its
//! largest or smallest, large scales, large and zero inputs).

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::quant::SUPPORTED;

/// Makes one byte of a block.
type Fill<'a> = &'a dyn Fn(&mut StdRng) -> u8;

/// Blocks of `ty`: `fill` for every byte, then `scale` in every f16 scale field; float types
/// get `float` per value.
fn matrix_with(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    rng: &mut StdRng,
    fill: Fill,
    scale: &dyn Fn(&mut StdRng) -> f32,
) -> QMatrix {
    let (per, bytes) = ty.block();
    let n = rows * cols / per;
    let mut data: Vec<u8> = (0..n * bytes).map(|_| fill(rng)).collect();
    match ty {
        GgmlType::F32 => data = (0..n).flat_map(|_| scale(rng).to_le_bytes()).collect(),
        GgmlType::F16 => {
            data = (0..n)
                .flat_map(|_| f16::from_f32(scale(rng)).to_le_bytes())
                .collect()
        }
        GgmlType::BF16 => {
            data = (0..n)
                .flat_map(|_| bf16::from_f32(scale(rng)).to_le_bytes())
                .collect()
        }
        _ => {
            for blk in data.chunks_exact_mut(bytes) {
                for &at in ty.f16_fields() {
                    blk[at..at + 2].copy_from_slice(&f16::from_f32(scale(rng)).to_le_bytes());
                }
            }
        }
    }
    QMatrix::new(ty, rows, cols, Bytes::owned(data)).expect("whole blocks")
}

/// Random blocks with sane scales (random bytes elsewhere cover every code).
fn random_matrix(ty: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> QMatrix {
    matrix_with(ty, rows, cols, rng, &|r| r.random(), &|r| {
        r.random_range(-0.05..0.05)
    })
}

/// Inputs with blocks of very different magnitudes, one block all zeros.
fn random_input(len: usize, rng: &mut StdRng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
    for (b, blk) in x.chunks_mut(BLOCK).enumerate() {
        let gain = [1.0, 30.0, 0.01, 0.0, 3.0, 1e4][b % 6];
        blk.iter_mut().for_each(|v| *v *= gain);
    }
    x
}

/// Each output, from the product and from every row kernel this CPU runs (the scalar one
/// included), against the f64 dot product of the dequantized row with the input.
fn check_products(m: &QMatrix, x: &[f32], t: usize, what: &str) {
    let (rows, cols) = (m.rows(), m.cols());
    let w = m.dequantize_range(0..rows);
    let got = m.matmul(x, t);
    assert_eq!(got.len(), t * rows);
    let gemm = m.gemm(x, t);
    let mut dots: Vec<(&str, Dot)> = kernels();
    dots.push(("scalar", portable::dot));
    for ti in 0..t {
        let xr = &x[ti * cols..(ti + 1) * cols];
        let xq = QuantRow::new(xr);
        for r in 0..rows {
            let wr = &w[r * cols..(r + 1) * cols];
            let want: f64 = wr.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
            let mag: f64 = wr
                .iter()
                .zip(xr)
                .map(|(&a, &b)| (a as f64 * b as f64).abs())
                .sum();
            let each = dots
                .iter()
                .map(|&(name, dot)| (name, dot(m.ty(), m.row(r), &xq)));
            let whole = std::iter::once(("product", got[ti * rows + r]))
                .chain(gemm.as_ref().map(|g| ("gemm", g[ti * rows + r])));
            for (name, g) in whole.chain(each) {
                let g = g as f64;
                assert!(
                    (g - want).abs() <= 1e-4 * mag + 1e-6,
                    "{:?} {name} {what} row {r} input {ti}: {g} vs {want} (scale {mag})",
                    m.ty()
                );
            }
        }
    }
}

#[test]
fn products_match_the_dequantized_weights() {
    let mut rng = StdRng::seed_from_u64(7);
    for ty in SUPPORTED {
        let per = ty.block().0.max(BLOCK);
        // Whole super-blocks; for the 32-value types and the floats also an odd block count
        // (a block left over for kernels that step two at a time), and for the floats a width
        // that is not a whole number of 32s.
        let mut widths = vec![3 * 256];
        if per == BLOCK {
            widths.push(11 * BLOCK);
        }
        if ty.block().0 == 1 {
            widths.push(24);
        }
        for cols in widths {
            let m = random_matrix(ty, 37, cols, &mut rng);
            // 17 rows: one whole block of the GEMM's 14 and a padded one.
            for t in [1, 3, 17] {
                let x = random_input(t * cols, &mut rng);
                check_products(&m, &x, t, &format!("{cols} columns"));
            }
        }
    }
}

#[test]
fn extremes_stay_exact() {
    let mut rng = StdRng::seed_from_u64(5);
    let fills: [(&str, Fill); 4] = [
        ("every bit set", &|_| 0xFF),
        ("every bit clear", &|_| 0),
        ("alternating", &|_| 0xAA),
        ("top bits only (Q8_0's -128)", &|_| 0x80),
    ];
    for ty in SUPPORTED {
        for (what, fill) in fills {
            for s in [-60000.0f32, 1e-4, 0.0] {
                let m = matrix_with(ty, 5, 512, &mut rng, fill, &|_| s);
                let big: Vec<f32> = (0..512)
                    .map(|i| if i % 2 == 0 { 3e4 } else { -3e4 })
                    .collect();
                check_products(&m, &big, 1, &format!("{what}, scale {s}"));
                // Each value 0.49 of a unit above a whole one: the low digits at their largest
                // and all of one sign, the integer kernels' sums at their bound.
                let halves: Vec<f32> = (0..512)
                    .map(|i| match i % 32 {
                        0 => 1.0,
                        k => ((k + 100) as f32 + 0.49) / 32767.0,
                    })
                    .collect();
                check_products(&m, &halves, 1, &format!("{what}, scale {s}, half units"));
                let x = random_input(512, &mut rng);
                check_products(&m, &x, 1, &format!("{what}, scale {s}, random input"));
            }
        }
    }
}

#[test]
fn the_simd_kernels_agree_with_the_scalar_reference() {
    let mut rng = StdRng::seed_from_u64(11);
    for (name, dot) in kernels() {
        for ty in SUPPORTED {
            for cols in [512, 11 * BLOCK] {
                if cols % ty.block().0 != 0 {
                    continue;
                }
                let m = random_matrix(ty, 5, cols, &mut rng);
                let x = QuantRow::new(&random_input(cols, &mut rng));
                for r in 0..5 {
                    let (s, v) = (portable::dot(ty, m.row(r), &x), dot(ty, m.row(r), &x));
                    let mag: f32 = m
                        .dequantize_rows(&[r])
                        .iter()
                        .zip(&x.x)
                        .map(|(a, b)| (a * b).abs())
                        .sum();
                    assert!(
                        (s - v).abs() <= 1e-5 * mag.max(1.0),
                        "{name} {ty:?} row {r}: scalar {s} vs simd {v}"
                    );
                }
            }
        }
    }
}

/// The several-input kernel gives each input exactly the bits the one-input kernel gives it,
/// for every count of inputs (whole groups and the rest) and both block parities.
#[test]
fn several_inputs_at_once_give_the_same_bits() {
    let (Some(rows), dot) = (kernel_rows(), kernel()) else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(12);
    let mut covered = 0;
    for ty in SUPPORTED {
        for cols in [512, 11 * BLOCK] {
            if cols % ty.block().0 != 0 {
                continue;
            }
            let m = random_matrix(ty, 3, cols, &mut rng);
            for t in [2, 3, 4, 5, 9] {
                let xs: Vec<QuantRow> = (0..t)
                    .map(|_| QuantRow::new(&random_input(cols, &mut rng)))
                    .collect();
                let mut out = vec![f32::NAN; t];
                if !rows(ty, m.row(1), &xs, &mut out) {
                    assert!(
                        out.iter().all(|v| v.is_nan()),
                        "{ty:?} wrote without covering"
                    );
                    continue;
                }
                covered += 1;
                for (x, got) in xs.iter().zip(&out) {
                    let want = dot(ty, m.row(1), x);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{ty:?} t={t}: {got} vs {want}"
                    );
                }
            }
        }
    }
    // Q4_0, Q5_0, Q8_0 and IQ4_NL at every level that has the kernel.
    assert!(
        covered >= 4 * 2 * 5,
        "the 32-value types are covered ({covered})"
    );
}

#[test]
fn row_lookups_ranges_and_views_dequantize_like_the_loader() {
    let mut rng = StdRng::seed_from_u64(3);
    for ty in SUPPORTED {
        let m = random_matrix(ty, 40, 256, &mut rng);
        let all = ty.dequantize(&m.data);
        assert_eq!(m.dequantize_range(0..40), all);
        assert_eq!(m.dequantize_range(17..23), all[17 * 256..23 * 256]);
        let rows = m.dequantize_rows(&[3, 39, 3]);
        assert_eq!(rows[..256], all[3 * 256..4 * 256]);
        assert_eq!(rows[256..512], all[39 * 256..40 * 256]);
        assert_eq!(rows[512..], all[3 * 256..4 * 256]);
        let view = m.row_range(10..20);
        assert_eq!((view.rows(), view.cols()), (10, 256));
        assert_eq!(view.dequantize_range(0..10), all[10 * 256..20 * 256]);
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
    // The two digits hold each value to about 2⁻³⁰ of its block's largest.
    for (i, &v) in x.iter().enumerate() {
        let back = (q.q[i] as f64 + q.lo[i] as f64 / 32768.0) * q.d[i / BLOCK] as f64;
        assert!(
            (back - v as f64).abs() <= q.d[i / BLOCK] as f64 / 32768.0,
            "{i}"
        );
    }
    let sum: f64 = x[16..32].iter().map(|&v| v as f64 / q.d[0] as f64).sum();
    assert!(
        (q.sum16[1] as f64 - sum).abs() < 1e-6 * sum.abs(),
        "{} vs {sum}",
        q.sum16[1]
    );
    let zeros = QuantRow::new(&[0.0; 32]);
    assert_eq!((zeros.d[0], zeros.sum16[0]), (0.0, 0.0));
    let ragged = QuantRow::new(&[1.0; 40]);
    assert_eq!(
        (ragged.q.len(), ragged.d.len(), ragged.x.len()),
        (64, 2, 40)
    );
}

#[test]
fn ragged_sizes_are_refused() {
    let b = |n: usize| Bytes::owned(vec![0; n]);
    assert!(QMatrix::new(GgmlType::Q4_0, 1, 32, b(18)).is_some());
    assert!(QMatrix::new(GgmlType::Q8_0, 1, 32, b(33)).is_none());
    assert!(QMatrix::new(GgmlType::Q4_K, 1, 128, b(72)).is_none());
    assert!(QMatrix::new(GgmlType::IQ4_XS, 1, 256, b(136)).is_some());
    assert!(QMatrix::new(GgmlType::Q8_0, 2, 32, b(68)).is_some());
    assert!(QMatrix::new(GgmlType::F16, 3, 24, b(144)).is_some());
}

/// The largest integer sums the kernels can meet: every code and sub-scale at its largest
/// magnitude with the same sign, against inputs at full scale (the VNNI kernels sum a whole
/// super-block in i32, the AVX2 ones a block's two digits: this is where they would overflow).
#[test]
fn the_largest_super_block_sums_do_not_overflow() {
    let one = half::f16::from_f32(1.0).to_le_bytes();
    // Q6_K: codes 0 (value −32) and every i8 scale −128: each value is 4096.
    let mut q6 = vec![0u8; 210];
    q6[192..208].fill(0x80);
    q6[208..210].copy_from_slice(&one);
    // Q5_K: codes 31 and every 6-bit scale 63, minimums 0.
    let mut q5 = vec![0u8; 176];
    q5[0..2].copy_from_slice(&one);
    q5[4..8].fill(0xFF);
    q5[12..16].fill(0x0F);
    q5[16..176].fill(0xFF);
    // Q8_0: every code −128 (the AVX2 kernel joins both digits' sums in one i32 lane).
    let mut q8 = vec![0x80u8; 34];
    q8[0..2].copy_from_slice(&one);
    for (ty, block) in [
        (GgmlType::Q6_K, q6),
        (GgmlType::Q5_K, q5),
        (GgmlType::Q8_0, q8),
    ] {
        let data: Vec<u8> = block
            .iter()
            .copied()
            .cycle()
            .take(block.len() * 512 / ty.block().0)
            .collect();
        let m = QMatrix::new(ty, 1, 512, Bytes::owned(data)).expect("whole blocks");
        for sign in [1.0f32, -1.0] {
            check_products(&m, &[sign * 3e4; 512], 1, "largest sums");
        }
    }
}

/// Where CI says what this machine must run (`GEMMA_CHAT_EXPECT_SIMD`, from `/proc/cpuinfo`
/// and the `GEMMA_CHAT_SIMD` cap; `GEMMA_CHAT_EXPECT_THREADS`, from `nproc`), the kernel and
/// thread tests above cannot pass by running nothing: the level, every kernel up to it, the
/// GEMM and the team's size are what was expected.
#[test]
fn the_expected_kernels_and_threads_are_the_ones_tested() {
    if let Ok(want) = std::env::var("GEMMA_CHAT_EXPECT_SIMD") {
        let level = super::simd::level();
        assert_eq!(level.name(), want, "SIMD level");
        let names: Vec<&str> = kernels().iter().map(|(n, _)| *n).collect();
        let all = ["avx512-vnni", "avx512", "avx-vnni", "avx2"];
        // The AVX-VNNI kernels run under an AVX-512 level only where the CPU has them too.
        #[cfg(target_arch = "x86_64")]
        let avx_vnni = std::arch::is_x86_feature_detected!("avxvnni");
        #[cfg(not(target_arch = "x86_64"))]
        let avx_vnni = false;
        let expected: Vec<&str> = all
            .iter()
            .copied()
            .skip_while(|n| *n != want)
            .filter(|n| *n != "avx-vnni" || avx_vnni)
            .collect();
        assert_eq!(names, expected, "row kernels at {want}");
        assert_eq!(
            super::gemm_available(),
            !expected.is_empty(),
            "GEMM at {want}"
        );
    }
    if let Ok(want) = std::env::var("GEMMA_CHAT_EXPECT_THREADS") {
        let want: usize = want.parse().expect("a thread count");
        assert_eq!(super::team::team().threads(), want, "the team's threads");
    }
}

#[test]
fn the_interleaved_walk_visits_every_row_once() {
    for n in 0..40 {
        let mut seen: Vec<usize> = interleaved(n).collect();
        assert_eq!(seen.len(), n, "{n} rows");
        seen.sort_unstable();
        assert!(seen.iter().copied().eq(0..n), "{n} rows: {seen:?}");
    }
}

#[test]
fn q5_0_in_lane_order_matches_the_dequantized_product() {
    // Every value once.
    let mut seen = LANE_ORDER;
    seen.sort_unstable();
    assert_eq!(seen, std::array::from_fn::<usize, BLOCK, _>(|i| i));
    let mut rng = StdRng::seed_from_u64(5);
    let m = random_matrix(GgmlType::Q5_0, 4, 20 * BLOCK, &mut rng);
    let exact = m.dequantize_range(0..4);
    for _ in 0..8 {
        let xr = random_input(20 * BLOCK, &mut rng);
        let x = QuantRow::new(&xr);
        assert_eq!(x.q_lanes.len(), x.q.len());
        for (r, w) in exact.chunks_exact(20 * BLOCK).enumerate() {
            let want: f64 = w.iter().zip(&xr).map(|(&w, &x)| w as f64 * x as f64).sum();
            for (name, dot) in kernels() {
                let got = dot(GgmlType::Q5_0, m.row(r), &x) as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "{name}: {got} vs {want}"
                );
            }
        }
    }
}
