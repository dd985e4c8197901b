//! The fused host step: a forward on the CPU backend in f32 (a decode step, a short turn, a
//! prefill chunk), layer by layer on plain vectors, with no tensor op between the matrix
//! products: norms, RoPE, attention over the host cache, GeGLU, the MoE routing and the
//! per-layer embeddings are loops over the rows, and each group of products (q/k/v, gate/up)
//! is one pass of the `qmatmul` kernels on their thread team (the GEMM for long chunks). The
//! burn graph in `model/` stays the definition (and the GPU path, and long chunks on a CPU with
//! neither AVX2 nor AVX-512); this one computes the same function and the oracle tests hold
//! both to it.

pub(crate) mod attention;

use burn::tensor::{Tensor, TensorData};

use super::ffn::{Experts, Mlp, Moe};
use super::host_math::{norm_rows, rope_row};
use super::ops::Linear;
use super::{Gemma, Layer, Logits};
use crate::error::{Error, Result};
use gemma_kernels::qmatmul::{QMatrix, gemm_available, gemm_many, matmul_many};
use gemma_kernels::vmath;

/// Up to this many tokens a forward on the CPU backend in f32 runs fused with the row kernels;
/// longer chunks (a prefill) run fused with the GEMM where the CPU has it (AVX-512 or AVX2),
/// else through burn's graph.
pub const FUSED_MAX_ROWS: usize = 24;

/// One fused forward's position: the rows still computed and the first one's position.
struct Step<'a> {
    model: &'a Gemma,
    rows: usize,
    q_start: usize,
    /// The forward's first position.
    pos: usize,
    /// Spans that see each other both ways on sliding layers ([`super::soft`]).
    blocks: &'a [std::ops::Range<usize>],
    /// cos and sin per position `pos..pos + T` (sliding layers, full layers): computed once
    /// per forward, not per layer.
    rope: RopeTables,
}

/// Half tables per position, for the sliding and the full layers' frequencies.
type RopeTables = (Vec<(Vec<f32>, Vec<f32>)>, Vec<(Vec<f32>, Vec<f32>)>);

/// The host matrix of a linear layer (on the CPU backend every one is).
fn host(l: &Linear) -> &QMatrix {
    match l {
        Linear::Host(q) => q,
        Linear::Dense(_) | Linear::Quant(_) => {
            unreachable!("the fused step runs only where weights are host")
        }
    }
}

/// `x · Wᵀ` for each weight, `x` being `rows × in`: one pass of the kernels for a few rows,
/// the GEMM for each weight for many.
fn products(ls: &[&Linear], x: &[f32], rows: usize) -> Vec<Vec<f32>> {
    let qs: Vec<&QMatrix> = ls.iter().map(|l| host(l)).collect();
    host_products(&qs, x, rows)
}

/// [`products`] of host matrices (also the vision towers'): the row kernels for a few rows or
/// where the CPU has no GEMM, the GEMM for each matrix otherwise.
pub(crate) fn host_products(qs: &[&QMatrix], x: &[f32], rows: usize) -> Vec<Vec<f32>> {
    if rows <= FUSED_MAX_ROWS || !gemm_available() {
        return matmul_many(qs, x, rows);
    }
    gemm_many(qs, x, rows).expect("the GEMM is available")
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

impl Gemma {
    /// Whether a forward of `t` tokens runs fused.
    pub(super) fn fused(&self, t: usize) -> bool {
        self.host
            && self.fused
            && self.dtype == burn::tensor::DType::F32
            && (t <= FUSED_MAX_ROWS || gemm_available())
    }

    /// Whether a forward of up to [`FUSED_MAX_ROWS`] rows computes each row exactly as a forward
    /// of that row alone does (the fused host step with the row kernels): what speculative
    /// decoding needs to keep answers the same.
    pub fn checks_exact(&self) -> bool {
        self.fused(FUSED_MAX_ROWS) && self.fused(1)
    }

    /// Turns the fused host step off (on by default), so that every forward runs burn's
    /// graph: for tests that hold both paths to the reference.
    #[doc(hidden)]
    pub fn set_fused(&mut self, on: bool) {
        self.fused = on;
    }

    /// [`Gemma::forward`] on the fused host path (the caller checked the arguments).
    pub(super) fn forward_fused(
        &self,
        ids: &[u32],
        merge: &super::Merge,
        cache: &mut super::KvCache,
        pos: usize,
        logits: Logits,
    ) -> Result<Option<Tensor<2>>> {
        let cfg = &self.config;
        let (t, hsize) = (ids.len(), cfg.hidden_size);
        let rows: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        let mut x = host(&self.embed).dequantize_rows(&rows);
        let scale = (hsize as f32).sqrt();
        x.iter_mut().for_each(|v| *v *= scale);
        for s in merge.soft {
            x[s.at * hsize..s.at * hsize + s.rows.len()].copy_from_slice(s.rows);
        }
        let mut ple = self.ple.as_ref().map(|_| self.ple_host(&merge.ple_ids, &x));
        let tables = |inv: &[f32]| (pos..pos + t).map(|p| rope_row(inv, p)).collect();
        let mut step = Step {
            model: self,
            rows: t,
            q_start: pos,
            pos,
            blocks: &merge.blocks,
            rope: (tables(&self.inv_freq_sliding), tables(&self.inv_freq_full)),
        };
        for (i, (layer, spec)) in self.layers.iter().zip(&cfg.layers).enumerate() {
            if spec.kv_donor.is_some() && logits == Logits::None {
                break;
            }
            if spec.kv_donor.is_some() && logits != Logits::All && step.rows > 1 {
                let keep = step.rows - 1;
                x.drain(..keep * hsize);
                if let Some(p) = ple.as_mut() {
                    let per = p.len() / step.rows;
                    p.drain(..keep * per);
                }
                step.q_start += keep;
                step.rows = 1;
            }
            step.layer(i, layer, &mut x, ple.as_deref(), cache)?;
        }
        cache.finish(t);

        if logits == Logits::None {
            return Ok(None);
        }
        if logits == Logits::Last && step.rows > 1 {
            x.drain(..(step.rows - 1) * hsize);
        }
        let n = x.len() / hsize;
        norm_rows(&self.final_norm, &mut x, hsize);
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let mut out = products(&[head], &x, n).remove(0);
        if let Some(c) = cfg.final_logit_softcapping {
            vmath::softcap_slice(&mut out, c);
        }
        let data = TensorData::new(out, [n, cfg.vocab_size]);
        Ok(Some(Tensor::<2>::from_data(data, &self.device)))
    }

    /// Per-layer inputs, `[T, L·P]`: `(norm(x0·Wᵀ·H^-½) + E_ple[ids]·√P) · 2^-½`.
    fn ple_host(&self, ids: &[u32], x0: &[f32]) -> Vec<f32> {
        let (cfg, p) = (&self.config, self.ple.as_ref().expect("a PLE model"));
        let spec = cfg.ple.as_ref().expect("a PLE model");
        let t = ids.len();
        let rows: Vec<usize> = ids
            .iter()
            .map(|&i| {
                if (i as usize) < spec.vocab {
                    i as usize
                } else {
                    0
                }
            })
            .collect();
        let mut tok = host(&p.table).dequantize_rows(&rows);
        let mut ctx = products(&[&p.model_projection], x0, t).remove(0);
        let inv = (cfg.hidden_size as f32).powf(-0.5);
        ctx.iter_mut().for_each(|v| *v *= inv);
        norm_rows(&p.projection_norm, &mut ctx, spec.width);
        let root = (spec.width as f32).sqrt();
        for (c, e) in ctx.iter_mut().zip(tok.iter_mut()) {
            *c = (*c + *e * root) * std::f32::consts::FRAC_1_SQRT_2;
        }
        ctx
    }
}

impl Step<'_> {
    /// One decoder layer on `x` (`[rows, H]`) in place.
    fn layer(
        &self,
        i: usize,
        layer: &Layer,
        x: &mut [f32],
        ple: Option<&[f32]>,
        cache: &mut super::KvCache,
    ) -> Result<()> {
        let cfg = self.model.config();
        let (h, spec) = (cfg.hidden_size, &cfg.layers[i]);
        let mut xn = x.to_vec();
        norm_rows(&layer.input_norm, &mut xn, h);
        let mut a = self.attention(&layer.attn, spec, i, &xn, cache)?;
        norm_rows(&layer.post_attn_norm, &mut a, h);
        add(x, &a);

        let mut xn = x.to_vec();
        norm_rows(&layer.pre_ffn_norm, &mut xn, h);
        let mut f = self.mlp(&layer.mlp, &xn);
        if let Some(m) = &layer.moe {
            let mut x2 = x.to_vec();
            norm_rows(&m.pre_norm, &mut x2, h);
            let mut e = self.moe(&m.experts, &x2, x)?;
            norm_rows(&m.post_dense_norm, &mut f, h);
            norm_rows(&m.post_norm, &mut e, h);
            add(&mut f, &e);
        }
        norm_rows(&layer.post_ffn_norm, &mut f, h);
        add(x, &f);

        if let (Some(lp), Some(p)) = (&layer.ple, ple) {
            let mut g = products(&[&lp.gate], x, self.rows).remove(0);
            let width = g.len() / self.rows;
            let per_row = p.len() / self.rows;
            for (r, gr) in g.chunks_exact_mut(width).enumerate() {
                let pr = &p[r * per_row + i * width..r * per_row + (i + 1) * width];
                vmath::geglu(gr, pr);
            }
            let mut y = products(&[&lp.projection], &g, self.rows).remove(0);
            norm_rows(&lp.post_norm, &mut y, h);
            add(x, &y);
        }
        if let Some(s) = layer.scalar {
            x.iter_mut().for_each(|v| *v *= s);
        }
        Ok(())
    }

    /// `down(gelu_tanh(gate(x)) ⊙ up(x))` for `n` rows.
    fn mlp_rows(mlp: &Mlp, x: &[f32], n: usize) -> Vec<f32> {
        let mut gu = products(&[&mlp.gate, &mlp.up], x, n).into_iter();
        let (mut g, u) = (gu.next().expect("gate"), gu.next().expect("up"));
        vmath::geglu(&mut g, &u);
        products(&[&mlp.down], &g, n).remove(0)
    }

    fn mlp(&self, mlp: &Mlp, x: &[f32]) -> Vec<f32> {
        Self::mlp_rows(mlp, x, self.rows)
    }

    /// The MoE branch: routed on `residual`, each chosen expert run once on its rows of `x`.
    fn moe(&self, moe: &Moe, x: &[f32], residual: &[f32]) -> Result<Vec<f32>> {
        let Experts::Each(mlps) = &moe.experts else {
            return Err(Error::Invalid("the fused step needs host experts".into()));
        };
        let h = x.len() / self.rows;
        let routes = moe.route_host(residual, h);
        let mut out = vec![0f32; x.len()];
        for (e, mlp) in mlps.iter().enumerate() {
            let (rows, weights): (Vec<usize>, Vec<f32>) = routes
                .iter()
                .enumerate()
                .filter_map(|(r, route)| route.iter().find(|(i, _)| *i == e).map(|(_, w)| (r, *w)))
                .unzip();
            if rows.is_empty() {
                continue;
            }
            let xs: Vec<f32> = rows
                .iter()
                .flat_map(|&r| x[r * h..(r + 1) * h].iter().copied())
                .collect();
            let y = Self::mlp_rows(mlp, &xs, rows.len());
            for ((&r, w), yr) in rows.iter().zip(&weights).zip(y.chunks_exact(h)) {
                out[r * h..(r + 1) * h]
                    .iter_mut()
                    .zip(yr)
                    .for_each(|(o, y)| *o += y * w);
            }
        }
        Ok(out)
    }
}
