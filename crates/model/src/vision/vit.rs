//! The ViT tower of E2B/E4B and 26B/31B (transformers' `Gemma4VisionModel`): patches mapped
//! `x → 2x − 1` and projected, plus a learned row per axis of their (x, y); encoder layers with
//! Gemma's sandwich norms, bidirectional attention over the picture's patches (q/k RMSNorm with
//! weight, v without, scale 1, 2-D RoPE: the first half of each head turned by x, the second by
//! y) and a GeGLU MLP, every projection clamped to its checkpoint's bounds when
//! `use_clipped_linears`; then each 3 × 3 block of patches averaged, times `√width`, and
//! standardized when the checkpoint says so.

use super::config::{VisionSpec, VitSpec};
use super::{PatchInput, matrix, norm, products, values};
use crate::error::Result;
use crate::model::fused::attention::{Heads, attend_groups};
use crate::model::host_math::norm_rows;
use crate::model::host_math::{Group, rope as turn_half, rope_row};
use crate::model::kv_cache::Rows;
use crate::model::ops::RmsNorm;
use crate::weights::TensorSource;
use gemma_kernels::qmatmul::QMatrix;

/// A projection, with the bounds its input and output are clamped to (transformers'
/// `Gemma4ClippableLinear`, which the audio tower shares).
#[derive(Debug)]
pub(crate) struct Clipped {
    w: QMatrix,
    /// Input min, input max, output min, output max.
    bounds: Option<[f32; 4]>,
}

impl Clipped {
    pub(crate) fn load(
        src: &dyn TensorSource,
        name: &str,
        shape: &[usize],
        clipped: bool,
    ) -> Result<Self> {
        let w = matrix(src, &format!("{name}.linear.weight"), shape)?;
        let bounds = if clipped {
            let mut b = [0f32; 4];
            for (v, key) in b
                .iter_mut()
                .zip(["input_min", "input_max", "output_min", "output_max"])
            {
                *v = values(src, &format!("{name}.{key}"), &[1])?[0];
            }
            Some(b)
        } else {
            None
        };
        Ok(Self { w, bounds })
    }

    /// `clamp(clamp(x) · Wᵀ)` for `t` rows.
    pub(crate) fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let Some([lo, hi, out_lo, out_hi]) = self.bounds else {
            return products(&self.w, x, t);
        };
        let x: Vec<f32> = x.iter().map(|v| v.max(lo).min(hi)).collect();
        let mut y = products(&self.w, &x, t);
        y.iter_mut().for_each(|v| *v = v.max(out_lo).min(out_hi));
        y
    }
}

#[derive(Debug)]
struct Layer {
    input_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    pre_ffn_norm: RmsNorm,
    post_ffn_norm: RmsNorm,
    q: Clipped,
    k: Clipped,
    v: Clipped,
    o: Clipped,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    /// Weightless.
    v_norm: RmsNorm,
    gate: Clipped,
    up: Clipped,
    down: Clipped,
}

/// The ViT's weights.
#[derive(Debug)]
pub(super) struct Vit {
    spec: VitSpec,
    input_proj: QMatrix,
    /// `[2, positions, width]` as `2 · positions` rows: x rows, then y rows. Kept in its stored
    /// type (the file's pages where it is mapped) and read a row at a time: 63 MB in f32 on
    /// E2B that a chat without pictures never touches.
    table: QMatrix,
    layers: Vec<Layer>,
    /// `(std_bias, std_scale)`.
    standardize: Option<(Vec<f32>, Vec<f32>)>,
    /// The RoPE's inverse frequencies over a quarter head.
    inv_freq: Vec<f32>,
}

impl Vit {
    pub(super) fn load(s: &VitSpec, vs: &VisionSpec, src: &dyn TensorSource) -> Result<Self> {
        let (h, p) = (s.hidden, vs.patch);
        let input_proj = matrix(
            src,
            "vision_tower.patch_embedder.input_proj.weight",
            &[h, 3 * p * p],
        )?;
        let table = matrix(
            src,
            "vision_tower.patch_embedder.position_embedding_table",
            &[2, s.positions, h],
        )?;
        let layers = (0..s.layers)
            .map(|i| Layer::load(src, s, vs.eps, i))
            .collect::<Result<_>>()?;
        let standardize = if s.standardize {
            Some((
                values(src, "vision_tower.std_bias", &[h])?,
                values(src, "vision_tower.std_scale", &[h])?,
            ))
        } else {
            None
        };
        // transformers' axial RoPE: `1 / θ^(2i / (head_dim / 2))` over a quarter head.
        let spatial = s.head_dim / 2;
        let inv_freq = (0..spatial / 2)
            .map(|i| 1.0 / s.theta.powf((2 * i) as f32 / spatial as f32))
            .collect();
        Ok(Self {
            spec: s.clone(),
            input_proj,
            table,
            layers,
            standardize,
            inv_freq,
        })
    }

    /// The pooled soft tokens (before the projector): `n / pool² × width` values.
    pub(super) fn forward(&self, input: PatchInput, vs: &VisionSpec) -> Result<Vec<f32>> {
        let (h, n) = (self.spec.hidden, input.positions.len());
        super::check_positions(input.positions, self.spec.positions, vs.pool * vs.pool)?;
        let shifted: Vec<f32> = input.values.iter().map(|v| 2.0 * (v - 0.5)).collect();
        let mut x = products(&self.input_proj, &shifted, n);
        let axis = self.spec.positions;
        for (row, &[px, py]) in x.chunks_exact_mut(h).zip(input.positions) {
            let t = self
                .table
                .dequantize_rows(&[px as usize, axis + py as usize]);
            let (tx, ty) = t.split_at(h);
            for ((v, a), b) in row.iter_mut().zip(tx).zip(ty) {
                *v += a + b;
            }
        }
        let rope: Vec<_> = input
            .positions
            .iter()
            .map(|&[px, py]| {
                (
                    rope_row(&self.inv_freq, px as usize),
                    rope_row(&self.inv_freq, py as usize),
                )
            })
            .collect();
        for layer in &self.layers {
            layer.forward(&mut x, n, &self.spec, &rope);
        }
        Ok(self.pool(&x, input.positions, vs.pool))
    }

    /// Averages each `k × k` block of patches (row-major over blocks), times `√width`, then
    /// standardizes.
    fn pool(&self, x: &[f32], positions: &[[u32; 2]], k: usize) -> Vec<f32> {
        let h = self.spec.hidden;
        let k2 = k * k;
        let n_out = positions.len() / k2;
        let cols = positions.iter().map(|p| p[0] as usize).max().unwrap_or(0) + 1;
        let mut out = vec![0f32; n_out * h];
        for (row, &[px, py]) in x.chunks_exact(h).zip(positions) {
            let idx = px as usize / k + (cols / k) * (py as usize / k);
            if idx >= n_out {
                continue;
            }
            let o = &mut out[idx * h..(idx + 1) * h];
            o.iter_mut().zip(row).for_each(|(o, v)| *o += v / k2 as f32);
        }
        let root = (h as f32).sqrt();
        out.iter_mut().for_each(|v| *v *= root);
        if let Some((bias, scale)) = &self.standardize {
            for row in out.chunks_exact_mut(h) {
                for ((v, b), s) in row.iter_mut().zip(bias).zip(scale) {
                    *v = (*v - b) * s;
                }
            }
        }
        out
    }
}

/// Per patch: (cos, sin) of its x and of its y over a quarter head.
type Rope = ((Vec<f32>, Vec<f32>), (Vec<f32>, Vec<f32>));

impl Layer {
    fn load(src: &dyn TensorSource, s: &VitSpec, eps: f64, i: usize) -> Result<Self> {
        let p = format!("vision_tower.encoder.layers.{i}");
        let (h, hd) = (s.hidden, s.head_dim);
        let lin = |name: &str, shape: &[usize]| {
            Clipped::load(src, &format!("{p}.{name}"), shape, s.clipped)
        };
        let weighted = |name: &str, n: usize| {
            values(src, &format!("{p}.{name}.weight"), &[n]).map(|w| norm(Some(w), eps))
        };
        Ok(Self {
            input_norm: weighted("input_layernorm", h)?,
            post_attn_norm: weighted("post_attention_layernorm", h)?,
            pre_ffn_norm: weighted("pre_feedforward_layernorm", h)?,
            post_ffn_norm: weighted("post_feedforward_layernorm", h)?,
            q: lin("self_attn.q_proj", &[s.heads * hd, h])?,
            k: lin("self_attn.k_proj", &[s.kv_heads * hd, h])?,
            v: lin("self_attn.v_proj", &[s.kv_heads * hd, h])?,
            o: lin("self_attn.o_proj", &[h, s.heads * hd])?,
            q_norm: weighted("self_attn.q_norm", hd)?,
            k_norm: weighted("self_attn.k_norm", hd)?,
            v_norm: norm(None, eps),
            gate: lin("mlp.gate_proj", &[s.intermediate, h])?,
            up: lin("mlp.up_proj", &[s.intermediate, h])?,
            down: lin("mlp.down_proj", &[h, s.intermediate])?,
        })
    }

    fn forward(&self, x: &mut [f32], n: usize, s: &VitSpec, rope: &[Rope]) {
        let h = s.hidden;
        let mut xn = x.to_vec();
        norm_rows(&self.input_norm, &mut xn, h);
        let mut a = self.attention(&xn, n, s, rope);
        norm_rows(&self.post_attn_norm, &mut a, h);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);

        let mut xn = x.to_vec();
        norm_rows(&self.pre_ffn_norm, &mut xn, h);
        let mut g = self.gate.forward(&xn, n);
        let u = self.up.forward(&xn, n);
        gemma_kernels::vmath::geglu(&mut g, &u);
        let mut f = self.down.forward(&g, n);
        norm_rows(&self.post_ffn_norm, &mut f, h);
        x.iter_mut().zip(&f).for_each(|(x, f)| *x += f);
    }

    /// Every patch attends to every patch.
    fn attention(&self, xn: &[f32], n: usize, s: &VitSpec, rope: &[Rope]) -> Vec<f32> {
        let hd = s.head_dim;
        // Normed per head, then turned by the 2-D RoPE (queries and keys only).
        let turn = |m: &mut [f32], norm: &RmsNorm, rotate: bool| {
            norm_rows(norm, m, hd);
            if !rotate {
                return;
            }
            let heads = m.len() / (n * hd);
            for (r, row) in m.chunks_exact_mut(heads * hd).enumerate() {
                let ((cx, sx), (cy, sy)) = &rope[r];
                for head in row.chunks_exact_mut(hd) {
                    let (first, second) = head.split_at_mut(hd / 2);
                    turn_half(first, cx, sx);
                    turn_half(second, cy, sy);
                }
            }
        };
        let mut q = self.q.forward(xn, n);
        turn(&mut q, &self.q_norm, true);
        let mut k = self.k.forward(xn, n);
        turn(&mut k, &self.k_norm, true);
        let mut v = self.v.forward(xn, n);
        turn(&mut v, &self.v_norm, false);
        let heads = Heads {
            rows: n,
            nh: s.heads,
            nkv: s.kv_heads,
            hd,
            keys: n,
        };
        let group = s.heads / s.kv_heads;
        let of = |i: usize| {
            let (r, kvh) = (i / s.kv_heads, i % s.kv_heads);
            let from = (r * s.heads + kvh * group) * hd;
            Group {
                q: &q[from..from + group * hd],
                dim: hd,
                k: Rows::F32(&k),
                v: Rows::F32(&v),
                stride: s.kv_heads * hd,
                offset: kvh * hd,
                keys: 0..n,
                scale: 1.0,
                softcap: None,
            }
        };
        let out = attend_groups(heads, &of);
        self.o.forward(&out, n)
    }
}
