//! What a loaded model's weights take: bytes per stored GGML type, and how many of them are the
//! mapped file's pages used in place against bytes the process (or a GPU) holds.

use std::collections::BTreeMap;

use super::ffn::{Experts, Mlp};
use super::ops::{Linear, RmsNorm};
use super::{Gemma, Layer};

/// Weight bytes of a loaded model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeightStats {
    /// Bytes per stored type (`"Q4_K"`, `"F32"`…); dense device tensors under their dtype.
    pub by_type: BTreeMap<String, usize>,
    /// Matrices read by the host kernels.
    pub host_matrices: usize,
    /// Bytes used in place from the mapped file.
    pub mapped: usize,
    /// Bytes held by the process or the device (norms, dense GPU weights, copies).
    pub owned: usize,
    /// Matrices kept in their blocks on a GPU.
    pub device_quantized: usize,
    /// Weights in the matrices (all of them, wherever they are): what the dequantized path
    /// holds at 2 bytes each on a GPU.
    pub matrix_weights: usize,
    /// Bytes in tensors on the model's device (on a GPU: everything but the tables read on
    /// the host).
    pub device: usize,
}

impl WeightStats {
    fn linear(&mut self, l: &Linear) {
        self.matrix_weights += match l {
            Linear::Host(q) => q.rows() * q.cols(),
            Linear::Quant(q) => q.host().rows() * q.host().cols(),
            Linear::Dense(w) => w.shape().num_elements(),
        };
        match l {
            Linear::Host(q) => {
                *self.by_type.entry(q.ty().name().to_string()).or_default() += q.bytes();
                self.host_matrices += 1;
                if q.is_mapped() {
                    self.mapped += q.bytes();
                } else {
                    self.owned += q.bytes();
                }
            }
            Linear::Dense(w) => self.device(w),
            Linear::Quant(q) => {
                let name = q.host().ty().name().to_string();
                *self.by_type.entry(name).or_default() += q.device_bytes();
                self.device_quantized += 1;
                self.owned += q.device_bytes();
                self.device += q.device_bytes();
            }
        }
    }

    /// A dense tensor on the device, under its dtype.
    fn device<const D: usize>(&mut self, w: &burn::tensor::Tensor<D>) {
        let bytes = w.shape().num_elements() * w.dtype().size();
        *self.by_type.entry(format!("{:?}", w.dtype())).or_default() += bytes;
        self.owned += bytes;
        self.device += bytes;
    }

    fn norm(&mut self, n: &RmsNorm) {
        if let Some(w) = &n.weight {
            self.device(w);
        }
    }

    fn mlp(&mut self, m: &Mlp) {
        [&m.gate, &m.up, &m.down]
            .into_iter()
            .for_each(|l| self.linear(l));
    }

    fn layer(&mut self, l: &Layer) {
        let a = &l.attn;
        [&a.q_proj, &a.o_proj]
            .into_iter()
            .for_each(|x| self.linear(x));
        a.k_proj
            .iter()
            .chain(&a.v_proj)
            .for_each(|x| self.linear(x));
        [
            &a.q_norm,
            &l.input_norm,
            &l.post_attn_norm,
            &l.pre_ffn_norm,
            &l.post_ffn_norm,
        ]
        .into_iter()
        .for_each(|n| self.norm(n));
        a.k_norm.iter().for_each(|n| self.norm(n));
        self.mlp(&l.mlp);
        if let Some(m) = &l.moe {
            let moe = &m.experts;
            [&m.pre_norm, &m.post_dense_norm, &m.post_norm]
                .into_iter()
                .for_each(|n| self.norm(n));
            self.device(&moe.router_proj);
            self.device(&moe.router_scale);
            match &moe.experts {
                Experts::Each(m) => m.iter().for_each(|m| self.mlp(m)),
                Experts::Stacked { gate_up, down, .. } => {
                    self.device(gate_up);
                    self.device(down);
                }
            }
        }
        if let Some(p) = &l.ple {
            [&p.gate, &p.projection]
                .into_iter()
                .for_each(|x| self.linear(x));
            self.norm(&p.post_norm);
        }
    }

    /// Everything `model` holds.
    pub fn of(model: &Gemma) -> Self {
        let mut s = Self::default();
        s.linear(&model.embed);
        model.lm_head.iter().for_each(|l| s.linear(l));
        if let Some(p) = &model.ple {
            s.linear(&p.table);
            s.linear(&p.model_projection);
            s.norm(&p.projection_norm);
        }
        model.layers.iter().for_each(|l| s.layer(l));
        s.norm(&model.final_norm);
        s
    }

    /// All weight bytes.
    pub fn total(&self) -> usize {
        self.mapped + self.owned
    }
}

impl Gemma {
    /// What the weights take, per type and mapped against owned.
    pub fn weight_stats(&self) -> WeightStats {
        WeightStats::of(self)
    }
}
