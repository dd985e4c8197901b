//! Builds a [`Gemma`] from a [`TensorSource`]: checks every tensor's shape against the config,
//! folds the family's norm offset into the norm weights, and places the weights: on the CPU
//! backend every matrix stays in its stored type, read in place from the mapped file; on a GPU
//! it moves to the device in the compute dtype (norms stay f32).

use std::sync::Arc;

use burn::tensor::{DType, Device, Tensor};

use super::attention::Attention;
use super::config::{AttnKind, ModelConfig};
use super::device_quant::DeviceQuant;
use super::ffn::{Experts, Mlp, Moe};
use super::ops::{Linear, RmsNorm, tensor};
use super::{Gemma, Layer, LayerPle, MoeBranch, Ple};
use crate::backend::{ComputeDtype, GpuWeights};
use crate::error::{Error, Result};
use crate::weights::{RawTensor, TensorSource};
use gemma_kernels::qmatmul::QMatrix;

/// Loads the model described by `config` from `src`. `progress(done, total)` is called after
/// each layer.
pub fn build(
    config: ModelConfig,
    src: &dyn TensorSource,
    device: &Device,
    dtype: ComputeDtype,
    gpu_weights: GpuWeights,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Gemma> {
    if !device.supports_dtype(dtype.dtype()) {
        return Err(Error::Backend(format!(
            "this device ({device:?}) cannot compute in {}: choose dtype = \"f16\" or \"f32\" \
             (WebGPU shaders have no bf16; CUDA GPUs from Ampere on do)",
            dtype.as_str()
        )));
    }
    let host = crate::backend::is_host(device);
    let b = Builder {
        src,
        device,
        dtype: dtype.dtype(),
        cfg: &config,
        host_kernels: host,
        quantized: !host && gpu_weights == GpuWeights::Quantized,
    };
    let h = config.hidden_size;
    let v = config.vocab_size;
    let l = config.num_layers();
    let embed = b.linear("embed_tokens.weight", &[v, h])?;
    let lm_head = if config.tie_word_embeddings {
        None
    } else {
        Some(b.linear("lm_head.weight", &[v, h])?)
    };
    let ple = match &config.ple {
        None => None,
        Some(p) => Some(Ple {
            table: b.table("embed_tokens_per_layer.weight", &[p.vocab, l * p.width])?,
            model_projection: b.linear("per_layer_model_projection.weight", &[l * p.width, h])?,
            projection_norm: b.norm("per_layer_projection_norm.weight", p.width)?,
        }),
    };
    let mut layers = Vec::with_capacity(l);
    for i in 0..l {
        layers.push(b.layer(i)?);
        progress(i + 1, l);
    }
    let final_norm = b.norm("norm.weight", h)?;
    let head_dim = |kind| {
        config
            .layers
            .iter()
            .find(|s| s.kind == kind)
            .map(|s| s.head_dim)
            .unwrap_or(2)
    };
    let inv_freq_sliding = config.rope_sliding.inv_freq(head_dim(AttnKind::Sliding));
    let inv_freq_full = config.rope_full.inv_freq(head_dim(AttnKind::Full));
    Ok(Gemma {
        embed,
        lm_head,
        ple,
        layers,
        final_norm,
        inv_freq_sliding,
        inv_freq_full,
        device: device.clone(),
        host,
        fused: true,
        dtype: dtype.dtype(),
        kv_dtype: super::KvDtype::default(),
        config,
    })
}

struct Builder<'a> {
    src: &'a dyn TensorSource,
    device: &'a Device,
    dtype: DType,
    cfg: &'a ModelConfig,
    /// Whether quantized weights may stay quantized (the CPU backend).
    host_kernels: bool,
    /// Whether quantized weights stay in their blocks on a GPU.
    quantized: bool,
}

impl Builder<'_> {
    fn weight<const D: usize>(&self, name: &str, shape: &[usize]) -> Result<Tensor<D>> {
        Ok(tensor(
            self.src.require(name, shape)?,
            self.device,
            self.dtype,
        ))
    }

    /// A weight used as `x · Wᵀ` or looked up by row: in its stored type, in place, on the CPU
    /// backend; on a GPU in its blocks (`gpu_weights = "quantized"`, a quantized type) or dense.
    fn linear(&self, name: &str, shape: &[usize]) -> Result<Linear> {
        if (self.host_kernels || self.quantized)
            && let Some(l) = self.place(Arc::new(self.matrix(name, shape)?))
        {
            return Ok(l);
        }
        Ok(Linear::Dense(self.weight(name, shape)?))
    }

    /// A stored matrix where it is used in its blocks: on the host for the CPU backend, on the
    /// device for quantized GPU weights; `None` for a float type on a GPU (kept dense).
    fn place(&self, q: Arc<QMatrix>) -> Option<Linear> {
        if self.host_kernels {
            return Some(Linear::Host(q));
        }
        DeviceQuant::upload(q, self.device, self.dtype).map(Linear::Quant)
    }

    /// A table only looked up by row (per-layer embeddings): on a GPU with quantized weights it
    /// stays in the file on the host, and the few rows a step needs go up.
    fn table(&self, name: &str, shape: &[usize]) -> Result<Linear> {
        if self.quantized {
            return Ok(Linear::Host(Arc::new(self.matrix(name, shape)?)));
        }
        self.linear(name, shape)
    }

    /// The stored tensor as a host matrix (a 3-D one as its stacked rows).
    fn matrix(&self, name: &str, shape: &[usize]) -> Result<QMatrix> {
        let b = self.src.blocks(name, shape)?;
        let ty = b.ty;
        QMatrix::from_blocks(b).ok_or_else(|| Error::Weights {
            path: self.src.path_of(name),
            msg: format!(
                "tensor `{name}` ({shape:?}) is not whole {} blocks",
                ty.name()
            ),
        })
    }

    fn norm_from(&self, raw: RawTensor) -> RmsNorm {
        let offset = self.cfg.norm_offset;
        let raw = RawTensor {
            data: raw.data.iter().map(|w| w + offset).collect(),
            shape: raw.shape,
        };
        RmsNorm {
            host: Some(raw.data.clone()),
            weight: Some(tensor(raw, self.device, DType::F32)),
            eps: self.cfg.rms_norm_eps,
        }
    }

    fn norm(&self, name: &str, dim: usize) -> Result<RmsNorm> {
        Ok(self.norm_from(self.src.require(name, &[dim])?))
    }

    fn bare_norm(&self) -> RmsNorm {
        RmsNorm {
            weight: None,
            host: None,
            eps: self.cfg.rms_norm_eps,
        }
    }

    fn mlp(&self, prefix: &str, width: usize) -> Result<Mlp> {
        let h = self.cfg.hidden_size;
        Ok(Mlp {
            gate: self.linear(&format!("{prefix}.gate_proj.weight"), &[width, h])?,
            up: self.linear(&format!("{prefix}.up_proj.weight"), &[width, h])?,
            down: self.linear(&format!("{prefix}.down_proj.weight"), &[h, width])?,
        })
    }

    fn layer(&self, i: usize) -> Result<Layer> {
        let cfg = self.cfg;
        let spec = &cfg.layers[i];
        let (h, hd, nh, nkv) = (cfg.hidden_size, spec.head_dim, cfg.num_heads, spec.kv_heads);
        let p = format!("layers.{i}");
        let shared = spec.kv_donor.is_some();
        // KV-shared layers never use their own K/V weights; checkpoints may or may not carry them.
        let k_proj = if shared {
            None
        } else {
            Some(self.linear(&format!("{p}.self_attn.k_proj.weight"), &[nkv * hd, h])?)
        };
        let v_proj = if shared || !spec.has_v_proj {
            None
        } else {
            Some(self.linear(&format!("{p}.self_attn.v_proj.weight"), &[nkv * hd, h])?)
        };
        let k_norm = if shared {
            None
        } else {
            Some(self.norm(&format!("{p}.self_attn.k_norm.weight"), hd)?)
        };
        let attn = Attention {
            q_proj: self.linear(&format!("{p}.self_attn.q_proj.weight"), &[nh * hd, h])?,
            k_proj,
            v_proj,
            o_proj: self.linear(&format!("{p}.self_attn.o_proj.weight"), &[h, nh * hd])?,
            q_norm: self.norm(&format!("{p}.self_attn.q_norm.weight"), hd)?,
            k_norm,
            v_norm: cfg.v_norm.then(|| self.bare_norm()),
        };
        let moe = match &cfg.moe {
            None => None,
            Some(m) => Some(MoeBranch {
                experts: self.moe(&p, m.num_experts, m.top_k, m.width)?,
                pre_norm: self.norm(&format!("{p}.pre_feedforward_layernorm_2.weight"), h)?,
                post_dense_norm: self
                    .norm(&format!("{p}.post_feedforward_layernorm_1.weight"), h)?,
                post_norm: self.norm(&format!("{p}.post_feedforward_layernorm_2.weight"), h)?,
            }),
        };
        let ple = match &cfg.ple {
            None => None,
            Some(pl) => Some(LayerPle {
                gate: self.linear(&format!("{p}.per_layer_input_gate.weight"), &[pl.width, h])?,
                projection: self
                    .linear(&format!("{p}.per_layer_projection.weight"), &[h, pl.width])?,
                post_norm: self.norm(&format!("{p}.post_per_layer_input_norm.weight"), h)?,
            }),
        };
        let scalar = self
            .src
            .optional(&format!("{p}.layer_scalar"), &[1])?
            .and_then(|t| t.data.first().copied());
        Ok(Layer {
            input_norm: self.norm(&format!("{p}.input_layernorm.weight"), h)?,
            attn,
            post_attn_norm: self.norm(&format!("{p}.post_attention_layernorm.weight"), h)?,
            pre_ffn_norm: self.norm(&format!("{p}.pre_feedforward_layernorm.weight"), h)?,
            mlp: self.mlp(&format!("{p}.mlp"), spec.mlp_width)?,
            post_ffn_norm: self.norm(&format!("{p}.post_feedforward_layernorm.weight"), h)?,
            moe,
            ple,
            scalar,
        })
    }

    /// One MLP per expert, cut (in place) from the stacked `[E·2W, H]` and `[E·H, W]` matrices
    /// and placed in their blocks; `None` where they are kept dense ([`Builder::place`]).
    fn each_expert(
        &self,
        gate_up: &QMatrix,
        down: &QMatrix,
        e: usize,
        width: usize,
        h: usize,
    ) -> Option<Vec<Mlp>> {
        let cut =
            |m: &QMatrix, rows: std::ops::Range<usize>| self.place(Arc::new(m.row_range(rows)));
        (0..e)
            .map(|i| {
                Some(Mlp {
                    gate: cut(gate_up, 2 * width * i..2 * width * i + width)?,
                    up: cut(gate_up, 2 * width * i + width..2 * width * (i + 1))?,
                    down: cut(down, h * i..h * (i + 1))?,
                })
            })
            .collect()
    }

    fn moe(&self, p: &str, e: usize, top_k: usize, width: usize) -> Result<Moe> {
        let h = self.cfg.hidden_size;
        let router = self
            .src
            .require(&format!("{p}.router.proj.weight"), &[e, h])?;
        let host_router = if self.host_kernels {
            (router.data.clone(), Vec::new())
        } else {
            Default::default()
        };
        let router_proj = tensor(router, self.device, DType::F32);
        let mut scale = self.src.require(&format!("{p}.router.scale"), &[h])?;
        let inv_sqrt_h = (h as f32).powf(-0.5);
        scale.data.iter_mut().for_each(|s| *s *= inv_sqrt_h);
        let per_expert_scale = self
            .src
            .require(&format!("{p}.router.per_expert_scale"), &[e])?;
        let gate_up = format!("{p}.experts.gate_up_proj");
        let down = format!("{p}.experts.down_proj");
        let blocks = if self.host_kernels || self.quantized {
            let gate_up = self.matrix(&gate_up, &[e, 2 * width, h])?;
            let down = self.matrix(&down, &[e, h, width])?;
            self.each_expert(&gate_up, &down, e, width, h)
        } else {
            None
        };
        let experts = if let Some(each) = blocks {
            Experts::Each(each)
        } else {
            Experts::Stacked {
                gate_up: self.weight(&gate_up, &[e, 2 * width, h])?,
                down: self.weight(&down, &[e, h, width])?,
                scale: tensor(per_expert_scale.clone(), self.device, DType::F32),
            }
        };
        let host_router = match host_router {
            (proj, _) if self.host_kernels => (proj, scale.data.clone()),
            empty => empty,
        };
        Ok(Moe {
            router_proj,
            router_scale: tensor(scale, self.device, DType::F32),
            host_router,
            per_expert_scale: per_expert_scale.data,
            router_norm: self.bare_norm(),
            experts,
            top_k,
        })
    }
}
