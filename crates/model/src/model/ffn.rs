//! The feed-forward branches: the dense GeGLU MLP of every layer and the mixture-of-experts block
//! of Gemma 4 26B-A4B (router in f32, top-k, renormalised, `per_expert_scale`; routed on the
//! host, or on a GPU gathered from stacked experts without reading anything back).

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

/// The experts' weights.
// One per MoE layer: the size of the stacked variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Experts {
    /// One MLP per expert: the CPU backend, where the host routes each token to its experts.
    Each(Vec<Mlp>),
    /// All experts stacked on a GPU: gate/up `[E, 2W, H]` (gate rows first), down `[E, H, W]`.
    /// A decode step gathers its experts on the device, so nothing is read back; a prefill
    /// routes on the host and multiplies each expert's slice.
    Stacked {
        /// `[E, 2W, H]`, in the compute dtype.
        gate_up: Tensor<3>,
        /// `[E, H, W]`, in the compute dtype.
        down: Tensor<3>,
        /// `per_expert_scale`, `[E]`, f32.
        scale: Tensor<1>,
    },
}

/// Up to this many (token, expert) pairs a step on a GPU gathers its experts' weights on the
/// device; above it (a prefill) the router's choice is read back and each expert runs once on
/// its tokens.
pub const GATHER_MAX_PAIRS: usize = 32;

/// The MoE branch: a router and `E` experts, each a GeGLU MLP.
#[derive(Debug, Clone)]
pub struct Moe {
    /// `[E, H]`, f32.
    pub(crate) router_proj: Tensor<2>,
    /// `router.scale · H^-0.5`, `[H]`, f32.
    pub(crate) router_scale: Tensor<1>,
    /// `[E]`, on the host.
    pub(crate) per_expert_scale: Vec<f32>,
    /// `router_proj` and `router_scale` on the host, for the fused host step (empty on a GPU).
    pub(crate) host_router: (Vec<f32>, Vec<f32>),
    /// Scale-less norm in front of the router.
    pub(crate) router_norm: RmsNorm,
    pub(crate) experts: Experts,
    pub(crate) top_k: usize,
}

impl Moe {
    /// Router probabilities, `[T, E]` in f32, where the model runs.
    fn probs(&self, residual: Tensor<2>) -> Tensor<2> {
        let z = self.router_norm.forward(cast(residual, DType::F32))
            * self.router_scale.clone().unsqueeze::<2>();
        softmax(z.matmul(self.router_proj.clone().t()), 1)
    }

    /// Routing weights per token: `(expert, weight)` for the chosen `top_k` experts.
    ///
    /// # Shapes
    /// - residual: `[T, H]` (the un-normalised stream after attention)
    pub fn route(&self, residual: Tensor<2>) -> Vec<Vec<(usize, f32)>> {
        let [t, _] = residual.dims();
        let probs = self
            .probs(residual)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        self.pick(&probs, t)
    }

    /// [`Moe::route`] on the host: `residual` is `[T, h]` values.
    pub fn route_host(&self, residual: &[f32], h: usize) -> Vec<Vec<(usize, f32)>> {
        let (proj, scale) = &self.host_router;
        let e = self.per_expert_scale.len();
        let t = residual.len() / h;
        let mut z = residual.to_vec();
        super::host_math::norm_rows(&self.router_norm, &mut z, h);
        let mut probs = Vec::with_capacity(t * e);
        for zr in z.chunks_exact_mut(h) {
            zr.iter_mut().zip(scale).for_each(|(v, s)| *v *= s);
            let logits: Vec<f32> = proj
                .chunks_exact(h)
                .map(|w| super::host_math::dot(zr, w))
                .collect();
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let sum: f32 = exps.iter().sum();
            probs.extend(exps.iter().map(|v| v / sum));
        }
        self.pick(&probs, t)
    }

    /// The top-k experts of each of `t` rows of router probabilities, with their weights.
    fn pick(&self, probs: &[f32], t: usize) -> Vec<Vec<(usize, f32)>> {
        let e = self.per_expert_scale.len();
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
        let [t, _] = x.dims();
        match &self.experts {
            Experts::Stacked {
                gate_up,
                down,
                scale,
            } if t * self.top_k <= GATHER_MAX_PAIRS => {
                self.gathered(x, residual, gate_up, down, scale)
            }
            _ => self.routed(x, residual),
        }
    }

    /// Routes on the host, then runs each chosen expert once on its tokens.
    fn routed(&self, x: Tensor<2>, residual: Tensor<2>) -> Tensor<2> {
        let routes = self.route(residual);
        let device = x.device();
        let dtype = x.dtype();
        let mut out = x.zeros_like();
        let count = self.per_expert_scale.len();
        for e in 0..count {
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
            let y = self.expert(e, x.clone().select(0, idx.clone())) * w;
            out = out.select_assign(0, idx, y, IndexingUpdateOp::Add);
        }
        out
    }

    /// Expert `e` on `x`: `[n, H]` → `[n, H]`.
    fn expert(&self, e: usize, x: Tensor<2>) -> Tensor<2> {
        match &self.experts {
            Experts::Each(mlps) => mlps[e].forward(x),
            Experts::Stacked { gate_up, down, .. } => {
                let [_, w2, h] = gate_up.dims();
                let gu: Tensor<2> = gate_up
                    .clone()
                    .slice([e..e + 1, 0..w2, 0..h])
                    .squeeze_dim(0);
                let d: Tensor<2> = down
                    .clone()
                    .slice([e..e + 1, 0..h, 0..w2 / 2])
                    .squeeze_dim(0);
                let y = x.matmul(gu.t());
                let [n, _] = y.dims();
                let gate = y.clone().slice([0..n, 0..w2 / 2]);
                let up = y.slice([0..n, w2 / 2..w2]);
                (gelu_tanh(gate) * up).matmul(d.t())
            }
        }
    }

    /// Routing, weights and experts all on the device: the top-k experts of each token are
    /// gathered from the stacks and multiplied as a batch, so a decode step reads nothing back.
    fn gathered(
        &self,
        x: Tensor<2>,
        residual: Tensor<2>,
        gate_up: &Tensor<3>,
        down: &Tensor<3>,
        scale: &Tensor<1>,
    ) -> Tensor<2> {
        let [t, h] = x.dims();
        let [_, w2, _] = gate_up.dims();
        let (k, width, dtype) = (self.top_k, w2 / 2, x.dtype());
        let (top, idx) = self.probs(residual).topk_with_indices(k, 1);
        let flat = idx.reshape([t * k]);
        let weights =
            (top.clone() / top.sum_dim(1)) * scale.clone().select(0, flat.clone()).reshape([t, k]);
        let xs = x
            .unsqueeze_dim::<3>(1)
            .repeat_dim(1, k)
            .reshape([t * k, 1, h]);
        let y = xs.matmul(gate_up.clone().select(0, flat.clone()).swap_dims(1, 2));
        let gate = y.clone().slice([0..t * k, 0..1, 0..width]);
        let up = y.slice([0..t * k, 0..1, width..w2]);
        let out = (gelu_tanh(gate) * up).matmul(down.clone().select(0, flat).swap_dims(1, 2));
        let weights = cast(weights, dtype).reshape([t, k, 1]);
        (out.reshape([t, k, h]) * weights)
            .sum_dim(1)
            .reshape([t, h])
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::tensor::Device;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;

    fn random(rng: &mut StdRng, shape: Vec<usize>) -> TensorData {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-0.5f32..0.5)).collect();
        TensorData::new(v, shape)
    }

    /// A MoE block with random weights, in both layouts.
    fn blocks(e: usize, k: usize, h: usize, w: usize) -> (Moe, Moe) {
        let device = Device::flex();
        let mut rng = StdRng::seed_from_u64(7);
        let gate_up = Tensor::<3>::from_data(random(&mut rng, vec![e, 2 * w, h]), &device);
        let down = Tensor::<3>::from_data(random(&mut rng, vec![e, h, w]), &device);
        let per_expert_scale: Vec<f32> = (0..e).map(|i| 0.5 + i as f32 * 0.1).collect();
        let expert = |i: usize, part: std::ops::Range<usize>| {
            Linear::Dense(gate_up.clone().slice([i..i + 1, part, 0..h]).squeeze_dim(0))
        };
        let each = (0..e)
            .map(|i| Mlp {
                gate: expert(i, 0..w),
                up: expert(i, w..2 * w),
                down: Linear::Dense(down.clone().slice([i..i + 1, 0..h, 0..w]).squeeze_dim(0)),
            })
            .collect();
        let base = Moe {
            router_proj: Tensor::from_data(random(&mut rng, vec![e, h]), &device).mul_scalar(8.0),
            router_scale: Tensor::ones([h], &device),
            per_expert_scale: per_expert_scale.clone(),
            host_router: Default::default(),
            router_norm: RmsNorm {
                weight: None,
                host: None,
                eps: 1e-6,
            },
            experts: Experts::Each(each),
            top_k: k,
        };
        let stacked = Moe {
            experts: Experts::Stacked {
                gate_up,
                down,
                scale: Tensor::from_data(TensorData::new(per_expert_scale, [e]), &device),
            },
            ..base.clone()
        };
        (base, stacked)
    }

    /// The stacked layout gives the per-expert result both ways: gathered on the device for a
    /// few tokens, routed on the host for many.
    #[test]
    fn stacked_experts_equal_one_mlp_per_expert() {
        let (e, k, h, w) = (8, 3, 16, 24);
        let (each, stacked) = blocks(e, k, h, w);
        let mut rng = StdRng::seed_from_u64(9);
        for t in [1, 2, GATHER_MAX_PAIRS / k, GATHER_MAX_PAIRS / k + 1, 17] {
            let x = Tensor::<2>::from_data(random(&mut rng, vec![t, h]), &Device::flex());
            let r = Tensor::<2>::from_data(random(&mut rng, vec![t, h]), &Device::flex());
            let want = each.forward(x.clone(), r.clone());
            let got = stacked.forward(x, r);
            let (a, b) = (
                want.into_data().try_to_vec::<f32>().expect("f32"),
                got.into_data().try_to_vec::<f32>().expect("f32"),
            );
            let d = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            let size = a.iter().map(|x| x.abs()).fold(0.0, f32::max);
            assert!(d < 1e-5 * size.max(1.0), "t = {t}: differs by {d}");
            assert!(size > 1e-2, "t = {t}: the experts gave nothing ({size})");
        }
    }
}
