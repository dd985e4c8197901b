//! The feed-forward branches: the dense GeGLU MLP of every layer and the mixture-of-experts block
//! of Gemma 4 26B-A4B (router on the host in f32, top-k, renormalised, `per_expert_scale`).

use burn::tensor::{DType, IndexingUpdateOp, Int, Tensor, TensorData, activation::softmax};

use super::ops::{Linear, RmsNorm, cast, gelu_tanh};

/// `down(gelu_tanh(gate(x)) ⊙ up(x))`.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

impl Mlp {
    /// # Shapes
    /// - x: `[T, H]` → `[T, H]`
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let [gate, up] =
            <[Tensor<2>; 2]>::try_from(Linear::forward_many(&[&self.gate, &self.up], x))
                .expect("two weights, two results");
        let h = gelu_tanh(gate) * up;
        self.down.forward(h)
    }
}

/// The MoE branch: a router and `E` experts, each a GeGLU MLP.
#[derive(Debug, Clone)]
pub struct Moe {
    /// `[E, H]`, f32.
    pub(crate) router_proj: Tensor<2>,
    /// `router.scale · H^-0.5`, `[H]`, f32.
    pub(crate) router_scale: Tensor<1>,
    /// `[E]`, on the host.
    pub(crate) per_expert_scale: Vec<f32>,
    /// Scale-less norm in front of the router.
    pub(crate) router_norm: RmsNorm,
    /// One MLP per expert (gate and up split from `gate_up_proj`).
    pub(crate) experts: Vec<Mlp>,
    pub(crate) top_k: usize,
}

impl Moe {
    /// Routing weights per token: `(expert, weight)` for the chosen `top_k` experts.
    ///
    /// # Shapes
    /// - residual: `[T, H]` (the un-normalised stream after attention)
    pub fn route(&self, residual: Tensor<2>) -> Vec<Vec<(usize, f32)>> {
        let [t, _] = residual.dims();
        let z = self.router_norm.forward(cast(residual, DType::F32))
            * self.router_scale.clone().unsqueeze::<2>();
        let logits = z.matmul(self.router_proj.clone().t());
        let probs = softmax(logits, 1)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        let e = self.experts.len();
        (0..t)
            .map(|row| {
                let p = &probs[row * e..(row + 1) * e];
                let mut idx: Vec<usize> = (0..e).collect();
                // Stable: equal probabilities keep the lower expert index first, as torch.topk.
                idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
                idx.truncate(self.top_k);
                let sum: f32 = idx.iter().map(|&i| p[i]).sum();
                idx.into_iter()
                    .map(|i| (i, p[i] / sum * self.per_expert_scale[i]))
                    .collect()
            })
            .collect()
    }

    /// # Shapes
    /// - x: `[T, H]` (after `pre_feedforward_layernorm_2`), residual: `[T, H]` → `[T, H]`
    pub fn forward(&self, x: Tensor<2>, residual: Tensor<2>) -> Tensor<2> {
        let routes = self.route(residual);
        let device = x.device();
        let dtype = x.dtype();
        let mut out = x.zeros_like();
        for (e, expert) in self.experts.iter().enumerate() {
            let (rows, weights): (Vec<i64>, Vec<f32>) = routes
                .iter()
                .enumerate()
                .filter_map(|(row, r)| {
                    r.iter()
                        .find(|(i, _)| *i == e)
                        .map(|(_, w)| (row as i64, *w))
                })
                .unzip();
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let idx = Tensor::<1, Int>::from_data(TensorData::new(rows, [n]), &device);
            let w = cast(
                Tensor::<2>::from_data(TensorData::new(weights, [n, 1]), &device),
                dtype,
            );
            let y = expert.forward(x.clone().select(0, idx.clone())) * w;
            out = out.select_assign(0, idx, y, IndexingUpdateOp::Add);
        }
        out
    }
}
