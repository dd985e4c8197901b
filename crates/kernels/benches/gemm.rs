//! The host products on their own: `x · Wᵀ` against GGUF-typed weights the size of the demo
//! model's layers (Gemma 3 270M: hidden 640, MLP 2048), for a decode step and a short turn (1 and
//! 8 input rows, the row kernels) and for prefill chunks (128 and 512 rows, the packed GEMM, in
//! GFLOP/s). Run with
//! `RAYON_NUM_THREADS=2 cargo bench -p gemma-kernels --bench gemm` (add `GEMMA_CHAT_SIMD=avx2`
//! for the AVX2 level, `GEMM_TYPES=Q8_0,Q5_0` for some types only, `GEMM_SHAPES=262144x640`
//! for other `rows x cols` shapes, the GEMM skipped above 2²⁴ weights); compare figures from
//! one run only, with the load average printed.

use std::time::Instant;

use gemma_kernels::Bytes;
use gemma_kernels::qmatmul::QMatrix;
use gemma_kernels::quant::GgmlType;

/// Random blocks of `ty` whose f16 scales are small and finite.
fn matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> QMatrix {
    let (per, bytes) = ty.block();
    let mut s = seed;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 24) as u8
    };
    let mut data: Vec<u8> = (0..rows * cols / per * bytes).map(|_| next()).collect();
    // Every scale field a small positive f16 (0x2000 ≈ 0.0078): offsets 0 and 2 cover the
    // 32-value types and Q4_K's d and dmin; Q6_K keeps its d at the block's end.
    let fields: &[usize] = match ty {
        GgmlType::Q6_K => &[208],
        _ => &[0, 2],
    };
    for block in data.chunks_exact_mut(bytes) {
        for &f in fields {
            block[f..f + 2].copy_from_slice(&0x2000u16.to_le_bytes());
        }
    }
    QMatrix::new(ty, rows, cols, Bytes::owned(data)).expect("whole blocks")
}

fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        f();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "threads {}  load {}",
        rayon::current_num_threads(),
        load.split_whitespace().next().unwrap_or("?")
    );
    // `GEMM_SHAPES=262144x640` (the demo model's LM head) times other `rows x cols` shapes.
    let shapes: Vec<(usize, usize)> = match std::env::var("GEMM_SHAPES") {
        Ok(list) => list
            .split(',')
            .filter_map(|s| s.split_once('x'))
            .filter_map(|(n, k)| Some((n.trim().parse().ok()?, k.trim().parse().ok()?)))
            .collect(),
        Err(_) => vec![(2048, 640), (640, 2048), (1024, 640), (640, 1024)],
    };
    let only = std::env::var("GEMM_TYPES").ok();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|t| t == ty.name()))
        {
            continue;
        }
        for &(n, k) in shapes.iter().filter(|s| s.1 % ty.block().0 == 0) {
            let m = matrix(ty, n, k, 0x9e37_79b9 + n as u64);
            for t in [1, 8] {
                let x: Vec<f32> = (0..t * k)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect();
                let s = time(|| {
                    std::hint::black_box(m.matmul(&x, t));
                });
                println!(
                    "{:5} {n:4}x{k:4} t={t:3}  rows {:6.3} ms {:6.2} µs per input row {:5.1} GB/s",
                    ty.name(),
                    s * 1e3,
                    s * 1e6 / t as f64,
                    m.bytes() as f64 / s / 1e9
                );
            }
            for t in [128, 512].into_iter().filter(|_| n * k <= 1 << 24) {
                let x: Vec<f32> = (0..t * k)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect();
                let flop = 2.0 * (n * k * t) as f64;
                let s = time(|| {
                    std::hint::black_box(m.gemm(&x, t));
                });
                println!(
                    "{:5} {n:4}x{k:4} t={t:3}  gemm {:6.2} ms {:6.1} GFLOP/s",
                    ty.name(),
                    s * 1e3,
                    flop / s / 1e9
                );
            }
        }
    }
}
