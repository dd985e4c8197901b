//! A GGUF matrix in its blocks on a GPU against the same weights dequantized to f16: `x · Wᵀ`
//! for one input row (a decode step: the fused block kernel) and for 512 (a prefill:
//! dequantized tiles through burn's matmul). It prints µs a call, and for one row the weight
//! bytes read a second, which is what bounds a large model's decode. The default shape is a
//! 27–31B model's FFN matrix (21504 × 5376).
//!
//!   cargo bench -p gemma-model --features wgpu --bench device_blocks -- [BACKEND] [ROWS COLS]
//!
//! BACKEND is `wgpu` (the default) or `cuda`; the random blocks are the tests' (sane f16 scales,
//! every code), so the figures are the kernels', not a model's.

use std::sync::Arc;
use std::time::Instant;

use burn::tensor::{DType, Device, Tensor, TensorData};
use gemma_kernels::Bytes;
use gemma_kernels::qmatmul::QMatrix;
use gemma_kernels::quant::{GgmlType, sample_blocks};
use gemma_model::model::device_quant::DeviceQuant;
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TYPES: [GgmlType; 4] = [
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q8_0,
];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let backend = args.first().map_or("wgpu", String::as_str);
    let dims: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (rows, cols) = match dims[..] {
        [r, c] => (r, c),
        _ => (21504, 5376),
    };
    let device = gemma_model::backend::device(backend).expect("the backend's device");
    println!("{backend}: W {rows} × {cols}, f16 compute; µs a call (median of 5 timings)");
    for ty in TYPES {
        one_type(ty, rows, cols, &device);
    }
}

fn one_type(ty: GgmlType, rows: usize, cols: usize, device: &Device) {
    let q = Arc::new(random_matrix(ty, rows, cols));
    let blocks = DeviceQuant::upload(q.clone(), device, DType::F16).expect("a block type");
    let block_bytes = blocks.device_bytes();
    let dense: Vec<f16> = q
        .dequantize_range(0..rows)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let dense = Tensor::<2>::from_data(TensorData::new(dense, [rows, cols]), device);
    let mut line = format!("{ty:?}");
    for t in [1, 512] {
        let x = input(t, cols, device);
        let calls = if t == 1 { 200 } else { 10 };
        let b = time(calls, || blocks.forward(x.clone()));
        let d = time(calls, || x.clone().matmul(dense.clone().t()));
        line += &format!("  T={t}: blocks {:9.1} µs, f16 {:9.1} µs", b * 1e6, d * 1e6);
        if t == 1 {
            line += &format!(
                " ({:.1} against {:.1} GB/s)",
                block_bytes as f64 / b / 1e9,
                (rows * cols * 2) as f64 / d / 1e9
            );
        }
    }
    println!("{line}");
}

/// `[t, cols]` random values in f16.
fn input(t: usize, cols: usize, device: &Device) -> Tensor<2> {
    let mut rng = StdRng::seed_from_u64(7);
    let x: Vec<f32> = (0..t * cols).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::<2>::from_data(TensorData::new(x, [t, cols]), device).cast(DType::F16)
}

/// Seconds a call, the median of 5 timings of `calls` calls, waiting for all of them.
fn time(calls: usize, mut f: impl FnMut() -> Tensor<2>) -> f64 {
    let wait = |y: Tensor<2>| y.slice([0..1, 0..1]).into_data();
    wait(f());
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            // Each call's output feeds the next sum, so no launch is skipped as unread.
            let mut acc = f().slice([0..1, 0..1]);
            for _ in 1..calls {
                acc = acc + f().slice([0..1, 0..1]);
            }
            wait(acc);
            start.elapsed().as_secs_f64() / calls as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

/// Random blocks of `ty` with sane f16 scales; random bytes elsewhere cover every code.
fn random_matrix(ty: GgmlType, rows: usize, cols: usize) -> QMatrix {
    let data = sample_blocks(ty, rows * cols / ty.block().0, 5);
    QMatrix::new(ty, rows, cols, Bytes::owned(data)).expect("whole blocks")
}
