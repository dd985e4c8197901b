//! Small building blocks shared by the decoder: linear layers, RMSNorm, RoPE tables and the
//! dtype helpers. Stateless; weights are read-only after load.

use burn::tensor::{DType, Device, Tensor, TensorData};

use crate::loader::RawTensor;

/// The dtype the model computes in. Norms, softmax and the router always run in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeDtype {
    /// 32-bit floats everywhere: the reference precision.
    #[default]
    F32,
    /// 16-bit floats for weights and activations; f32 for norms and softmax.
    F16,
}

impl ComputeDtype {
    /// The burn dtype.
    pub fn dtype(self) -> DType {
        match self {
            ComputeDtype::F32 => DType::F32,
            ComputeDtype::F16 => DType::F16,
        }
    }

    /// Its name, as the config and `--dtype` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ComputeDtype::F32 => "f32",
            ComputeDtype::F16 => "f16",
        }
    }
}

impl std::str::FromStr for ComputeDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" | "float32" => Ok(ComputeDtype::F32),
            "f16" | "float16" => Ok(ComputeDtype::F16),
            other => Err(format!("unknown dtype `{other}`: use f32 or f16")),
        }
    }
}

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

/// `y = x · Wᵀ` with the weight kept in the checkpoint's `[out, in]` layout.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor<2>,
}

impl Linear {
    /// # Shapes
    /// - x: `[T, in]` → `[T, out]`
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        matmul_t(x, &self.weight)
    }
}

/// `x · wᵀ` for `w` in `[out, in]` layout. A single row (a decode step) is split over the
/// output rows across threads: a one-row matmul runs on one core and is bound by that core's
/// memory bandwidth, while decode reads every weight once per token. Each output is still one
/// row's dot product, computed as before, so the result does not change. (On a GPU backend the
/// split only adds kernel launches; asking the device on every call cost more than it saved on
/// the CPU, so the choice belongs at load time when the GPU backends get their tuning.)
pub fn matmul_t(x: Tensor<2>, w: &Tensor<2>) -> Tensor<2> {
    use rayon::prelude::*;
    let [rows, _] = x.dims();
    let [out, inner] = w.dims();
    let parts = rayon::current_num_threads().min(8);
    if rows != 1 || parts < 2 || out < 256 {
        return x.matmul(w.clone().t());
    }
    let step = out.div_ceil(parts);
    let outs: Vec<Tensor<2>> = (0..out)
        .step_by(step)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|from| {
            let part = w.clone().slice([from..(from + step).min(out), 0..inner]);
            x.clone().matmul(part.t())
        })
        .collect();
    Tensor::cat(outs, 1)
}

/// RMSNorm over the last axis, computed in f32 and cast back once. The weight already carries the
/// family's offset (`1 + w` for Gemma 3); `None` is the scale-less variant.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// `[dim]`, f32.
    pub weight: Option<Tensor<1>>,
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

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;

    #[test]
    fn a_split_one_row_matmul_equals_the_plain_one() {
        let device = Device::flex();
        let x = Tensor::<2>::from_data(
            TensorData::new(
                (0..64).map(|i| i as f32 * 0.01).collect::<Vec<_>>(),
                [1, 64],
            ),
            &device,
        );
        let w = Tensor::<2>::from_data(
            TensorData::new(
                (0..64 * 1000)
                    .map(|i| ((i * 7919) % 113) as f32 * 0.001 - 0.05)
                    .collect::<Vec<_>>(),
                [1000, 64],
            ),
            &device,
        );
        let split = matmul_t(x.clone(), &w)
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let plain = x
            .matmul(w.t())
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        assert_eq!(split, plain);
    }
}
