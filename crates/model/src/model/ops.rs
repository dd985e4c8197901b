//! Small building blocks shared by the decoder: linear layers (dense or in their blocks on a
//! GPU, or the stored blocks on the host that call into `qmatmul`), RMSNorm, GELU, RoPE tables
//! and the dtype helpers. Stateless; weights are read-only after load.

use std::sync::Arc;

use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use gemma_kernels::qmatmul::{QMatrix, matmul_many};

use super::device_quant::DeviceQuant;
use crate::weights::RawTensor;

/// Creates a device tensor from host data in the given dtype.
pub fn tensor<const D: usize>(raw: RawTensor, device: &Device, dtype: DType) -> Tensor<D> {
    let mut shape = raw.shape;
    // Scalars stored as 0-d or [1] tensors both become [1].
    while shape.len() < D {
        shape.insert(0, 1);
    }
    let t = Tensor::<D>::from_data(TensorData::new(raw.data, shape), device);
    cast(t, dtype)
}

/// Casts when the dtype differs; a no-op otherwise.
pub fn cast<const D: usize>(x: Tensor<D>, dtype: DType) -> Tensor<D> {
    if x.dtype() == dtype { x } else { x.cast(dtype) }
}

/// Above this many input rows a quantized weight is dequantized in tiles for burn's matmul (a
/// prefill); up to it the quantized kernels run (a decode step, a short turn). Measured on the
/// demo model: a 20-token turn takes 241 ms through the kernels and 280 ms through tiles, and
/// the kernels' cost grows with the rows while the tiles' is mostly the dequantization.
const QUANT_KERNEL_MAX_ROWS: usize = 24;

/// Values per dequantized tile of a quantized weight: bounds the scratch memory of a prefill.
const DEQUANT_TILE: usize = 1 << 22;

/// `y = x · Wᵀ` with the weight kept in the checkpoint's `[out, in]` layout: a dense tensor on
/// a GPU, or (on the CPU backend) the stored tensor in its GGML type, read in place.
// A model holds a few hundred of these: the size of the dense variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Linear {
    /// `[out, in]` on the device, in the compute dtype.
    Dense(Tensor<2>),
    /// `[out, in]` in its GGML type on the host.
    Host(Arc<QMatrix>),
    /// `[out, in]` in its blocks on a GPU (`gpu_weights = "quantized"`).
    Quant(DeviceQuant),
}

impl Linear {
    /// # Shapes
    /// - x: `[T, in]` → `[T, out]`
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        match self {
            Linear::Dense(w) => x.matmul(w.clone().t()),
            Linear::Host(q) => host_forward(q, x),
            Linear::Quant(q) => q.forward(x),
        }
    }

    /// `x · Wᵀ` for several weights on the same input (q/k/v, gate/up). Quantized weights share
    /// one quantization of `x` and one pass over the threads; the results equal separate
    /// [`Linear::forward`] calls.
    pub fn forward_many(linears: &[&Linear], x: Tensor<2>) -> Vec<Tensor<2>> {
        let [t, _] = x.dims();
        let quant: Option<Vec<&QMatrix>> = linears
            .iter()
            .map(|l| match l {
                Linear::Host(q) => Some(&**q),
                Linear::Dense(_) | Linear::Quant(_) => None,
            })
            .collect();
        match quant {
            Some(qs) if t <= QUANT_KERNEL_MAX_ROWS && linears.len() > 1 => {
                let (device, dtype) = (x.device(), x.dtype());
                let xs = host_f32(x);
                matmul_many(&qs, &xs, t)
                    .into_iter()
                    .zip(qs)
                    .map(|(y, q)| {
                        let y = TensorData::new(y, [t, q.rows()]);
                        cast(Tensor::<2>::from_data(y, &device), dtype)
                    })
                    .collect()
            }
            _ => linears.iter().map(|l| l.forward(x.clone())).collect(),
        }
    }

    /// Rows `ids` of the weight (an embedding lookup), in `dtype`.
    ///
    /// # Shapes
    /// - returns `[ids.len(), in]`
    pub fn rows(&self, ids: &[u32], device: &Device, dtype: DType) -> Tensor<2> {
        match self {
            Linear::Dense(w) => {
                let idx = ids.iter().map(|&i| i as i64).collect::<Vec<_>>();
                let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [ids.len()]), device);
                cast(w.clone().select(0, idx), dtype)
            }
            Linear::Host(q) => host_rows(q, ids, device, dtype),
            // Read from the file's blocks on the host: a lookup moves a few rows up, not the
            // table through a dequantization on the device.
            Linear::Quant(q) => host_rows(q.host(), ids, device, dtype),
        }
    }
}

/// Rows `ids` of a host matrix, dequantized, as a tensor on `device`.
fn host_rows(q: &QMatrix, ids: &[u32], device: &Device, dtype: DType) -> Tensor<2> {
    let rows: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
    let data = TensorData::new(q.dequantize_rows(&rows), [ids.len(), q.cols()]);
    cast(Tensor::<2>::from_data(data, device), dtype)
}

/// The values of `x` on the host, as f32.
fn host_f32(x: Tensor<2>) -> Vec<f32> {
    cast(x, DType::F32)
        .into_data()
        .try_into_vec::<f32>()
        .expect("an f32 tensor reads as f32")
}

/// A host weight times `x`: the host kernels for a few rows; for many, the packed GEMM on
/// dequantized panels where the CPU has it (f32), else dequantized tiles and burn's matmul.
fn host_forward(q: &QMatrix, x: Tensor<2>) -> Tensor<2> {
    let [t, _] = x.dims();
    let (device, dtype) = (x.device(), x.dtype());
    if t <= QUANT_KERNEL_MAX_ROWS {
        let xs = host_f32(x);
        let y = TensorData::new(q.matmul(&xs, t), [t, q.rows()]);
        return cast(Tensor::<2>::from_data(y, &device), dtype);
    }
    if dtype == DType::F32 {
        let xs = host_f32(x.clone());
        if let Some(y) = q.gemm(&xs, t) {
            return Tensor::<2>::from_data(TensorData::new(y, [t, q.rows()]), &device);
        }
    }
    let tile = (DEQUANT_TILE / q.cols()).max(1);
    let parts: Vec<Tensor<2>> = (0..q.rows())
        .step_by(tile)
        .map(|from| {
            let to = (from + tile).min(q.rows());
            let w = TensorData::new(q.dequantize_range(from..to), [to - from, q.cols()]);
            let w = cast(Tensor::<2>::from_data(w, &device), dtype);
            x.clone().matmul(w.t())
        })
        .collect();
    Tensor::cat(parts, 1)
}

/// GELU with the tanh approximation, computed as `x · σ(2√(2/π) · x · (1 + 0.044715 x²))`: the
/// same function (`½(1 + tanh z) = σ(2z)`), with the cube as products. burn's
/// `gelu_approximate` calls `powf` and `tanh` per value, which took a tenth of a CPU prefill.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    const TWO_SQRT_2_OVER_PI: f32 =
        2.0 * std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    let square = x.clone() * x.clone();
    let z = x.clone() * square.mul_scalar(0.044715).add_scalar(1.0);
    x * burn::tensor::activation::sigmoid(z.mul_scalar(TWO_SQRT_2_OVER_PI))
}

/// RMSNorm over the last axis, computed in f32 and cast back once. The weight already carries the
/// family's offset (`1 + w` for Gemma 3); `None` is the scale-less variant.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// `[dim]`, f32.
    pub weight: Option<Tensor<1>>,
    /// The same values on the host, for the fused host step.
    pub host: Option<Vec<f32>>,
    /// ε inside the square root.
    pub eps: f64,
}

impl RmsNorm {
    /// Normalises `x` over its last axis.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let dtype = x.dtype();
        let x = cast(x, DType::F32);
        let ms = x.clone().square().mean_dim(D - 1);
        let y = x * ms.add_scalar(self.eps).sqrt().recip();
        let y = match &self.weight {
            Some(w) => y * w.clone().unsqueeze::<D>(),
            None => y,
        };
        cast(y, dtype)
    }
}

/// cos/sin tables for one chunk of positions: `[T, head_dim]` each, the half-table repeated
/// (rotate-half convention).
pub fn rope_tables(
    inv_freq: &[f32],
    start: usize,
    len: usize,
    device: &Device,
    dtype: DType,
) -> (Tensor<2>, Tensor<2>) {
    let half = inv_freq.len();
    let mut cos = Vec::with_capacity(len * half * 2);
    let mut sin = Vec::with_capacity(len * half * 2);
    for t in 0..len {
        let p = (start + t) as f32;
        let row: Vec<f32> = inv_freq.iter().map(|f| p * f).collect();
        for _ in 0..2 {
            cos.extend(row.iter().map(|a| a.cos()));
            sin.extend(row.iter().map(|a| a.sin()));
        }
    }
    let mk = |v: Vec<f32>| {
        cast(
            Tensor::<2>::from_data(TensorData::new(v, [len, half * 2]), device),
            dtype,
        )
    };
    (mk(cos), mk(sin))
}

/// Applies RoPE to `[heads, T, hd]` with `[T, hd]` tables.
pub fn apply_rope(x: Tensor<3>, cos: &Tensor<2>, sin: &Tensor<2>) -> Tensor<3> {
    let [h, t, hd] = x.dims();
    let half = hd / 2;
    let x1 = x.clone().slice([0..h, 0..t, 0..half]);
    let x2 = x.clone().slice([0..h, 0..t, half..hd]);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 2);
    x * cos.clone().unsqueeze::<3>() + rotated * sin.clone().unsqueeze::<3>()
}
