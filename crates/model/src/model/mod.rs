//! The Gemma decoder (Gemma 3 and every Gemma 4 variant) on burn. Holds weights only:
//! [`Gemma::forward`] reads and extends a [`KvCache`] that the caller owns, so one set of weights
//! serves every conversation.

pub mod attention;
pub mod build;
pub mod config;
pub mod device_quant;
pub mod ffn;
pub(crate) mod fused;
pub mod gguf_config;
pub(crate) mod host_math;
pub mod kv_cache;
pub mod ops;
pub mod soft;

pub mod stats;

use burn::tensor::{DType, Device, Tensor};

use self::attention::{Attention, AttnInput, MaskCache};
use self::config::{AttnKind, ModelConfig};
use self::ffn::{Mlp, Moe};
pub use self::fused::FUSED_MAX_ROWS;
pub use self::kv_cache::{KvCache, KvDtype, KvLayout};
use self::ops::{RmsNorm, cast, rope_tables};
use self::soft::Merge;
pub use self::soft::Soft;
pub use crate::backend::{ComputeDtype, GpuWeights};
use crate::error::{Error, Result};

/// Which positions' logits a forward returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// None: a prefill chunk whose logits nobody reads.
    None,
    /// The last position only (decode, the last prefill chunk).
    Last,
    /// Every position of the chunk (`--dump-logits`, tests).
    All,
}

/// Per-layer embedding weights (E2B/E4B).
#[derive(Debug, Clone)]
pub(crate) struct Ple {
    /// `[V_ple, L·P]`.
    pub table: ops::Linear,
    /// `[L·P, H]`.
    pub model_projection: ops::Linear,
    pub projection_norm: RmsNorm,
}

/// Per-layer PLE weights.
#[derive(Debug, Clone)]
pub(crate) struct LayerPle {
    pub gate: ops::Linear,
    pub projection: ops::Linear,
    pub post_norm: RmsNorm,
}

/// A layer's mixture-of-experts branch (26B-A4B), beside the dense MLP, with its norms.
#[derive(Debug, Clone)]
pub(crate) struct MoeBranch {
    pub experts: Moe,
    /// `pre_feedforward_layernorm_2`: on the branch's input.
    pub pre_norm: RmsNorm,
    /// `post_feedforward_layernorm_1`: on the dense MLP's output.
    pub post_dense_norm: RmsNorm,
    /// `post_feedforward_layernorm_2`: on the experts' output.
    pub post_norm: RmsNorm,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub input_norm: RmsNorm,
    pub attn: Attention,
    pub post_attn_norm: RmsNorm,
    pub pre_ffn_norm: RmsNorm,
    pub mlp: Mlp,
    pub post_ffn_norm: RmsNorm,
    pub moe: Option<MoeBranch>,
    pub ple: Option<LayerPle>,
    /// `layer_scalar`, multiplies the whole stream at the end of the layer.
    pub scalar: Option<f32>,
}

/// A loaded Gemma text decoder.
#[derive(Clone)]
pub struct Gemma {
    pub(crate) config: ModelConfig,
    /// `[V, H]`; also the LM head when the embeddings are tied.
    pub(crate) embed: ops::Linear,
    pub(crate) lm_head: Option<ops::Linear>,
    pub(crate) ple: Option<Ple>,
    pub(crate) layers: Vec<Layer>,
    pub(crate) final_norm: RmsNorm,
    pub(crate) inv_freq_sliding: Vec<f32>,
    pub(crate) inv_freq_full: Vec<f32>,
    pub(crate) device: Device,
    /// Whether `device` is the CPU backend.
    pub(crate) host: bool,
    /// Whether host forwards may run the fused step (see `fused/`).
    pub(crate) fused: bool,
    pub(crate) dtype: DType,
    /// What host caches keep keys and values in (see [`Gemma::host_kv_dtype`]).
    pub(crate) kv_dtype: KvDtype,
}

impl std::fmt::Debug for Gemma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemma")
            .field("model_type", &self.config.model_type)
            .field("layers", &self.layers.len())
            .field("hidden_size", &self.config.hidden_size)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

impl Gemma {
    /// The resolved configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Sets how image positions are masked: a GGUF text file does not say, its mmproj does
    /// ([`crate::vision::mmproj::Mmproj::image_blocks`]).
    pub fn set_image_blocks(&mut self, rule: config::ImageBlocks) {
        self.config.image_blocks = rule;
    }

    /// The compute device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The compute dtype (also the KV cache's).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Sets what caches made from now on keep keys and values in on the host (f16 by default).
    /// Only a model on the CPU backend in f32 keeps its cache on the host; the others keep the
    /// compute dtype on the device whatever this says.
    pub fn set_kv_dtype(&mut self, t: KvDtype) {
        self.kv_dtype = t;
    }

    /// The KV type asked for with [`Gemma::set_kv_dtype`].
    pub fn kv_dtype(&self) -> KvDtype {
        self.kv_dtype
    }

    /// The type this model's caches keep on the host, `None` where they are device tensors in
    /// the compute dtype.
    pub fn host_kv_dtype(&self) -> Option<KvDtype> {
        (self.host && self.dtype == DType::F32).then_some(self.kv_dtype)
    }

    /// Average bytes one cached key or value takes.
    pub fn kv_value_bytes(&self) -> f64 {
        self.host_kv_dtype()
            .map_or(self.dtype.size() as f64, KvDtype::value_bytes)
    }

    /// A fresh, empty cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(&self.config, self.host_kv_dtype())
    }

    /// Runs `ids` at positions `pos..pos + ids.len()` and appends their keys and values to
    /// `cache`, which must hold exactly `pos` positions.
    ///
    /// # Shapes
    /// - returns `[1, vocab]` for [`Logits::Last`], `[T, vocab]` for [`Logits::All`], and
    ///   `None` for [`Logits::None`]; always f32.
    pub fn forward(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
        pos: usize,
        logits: Logits,
    ) -> Result<Option<Tensor<2>>> {
        self.forward_with(ids, &[], cache, pos, logits)
    }

    /// [`Gemma::forward`] with soft tokens: the rows of each [`Soft`] take the place of the
    /// embeddings of its ids (an image's placeholders), as [`soft`] describes.
    pub fn forward_with(
        &self,
        ids: &[u32],
        soft: &[Soft],
        cache: &mut KvCache,
        pos: usize,
        logits: Logits,
    ) -> Result<Option<Tensor<2>>> {
        self.check_forward(ids, cache, pos)?;
        let merge = self.merge(ids, soft, pos)?;
        // burn's graph on the CPU runs on a worker of the thread pool: its parallel loops then
        // start on a running thread instead of waking one and parking the caller, which cost
        // more than a small matrix's product. The fused step runs here, with the kernels' own
        // thread team.
        if self.fused(ids.len()) {
            return self.forward_fused(ids, &merge, cache, pos, logits);
        }
        if self.host {
            rayon::scope(|_| self.forward_graph(ids, &merge, cache, pos, logits))
        } else {
            self.forward_graph(ids, &merge, cache, pos, logits)
        }
    }

    fn forward_graph(
        &self,
        ids: &[u32],
        merge: &Merge,
        cache: &mut KvCache,
        pos: usize,
        logits: Logits,
    ) -> Result<Option<Tensor<2>>> {
        let (t, hsize) = (ids.len(), self.config.hidden_size);
        // Embedding scale: sqrt(H) in the compute dtype, as the reference casts its buffer.
        let scale = match self.dtype {
            DType::F16 => half::f16::from_f32((hsize as f32).sqrt()).to_f32(),
            DType::BF16 => half::bf16::from_f32((hsize as f32).sqrt()).to_f32(),
            _ => (hsize as f32).sqrt(),
        };
        let mut x = self
            .embed
            .rows(ids, &self.device, self.dtype)
            .mul_scalar(scale);
        for s in merge.soft {
            let n = s.len(hsize);
            let rows = Tensor::<2>::from_data(
                burn::tensor::TensorData::new(s.rows.to_vec(), [n, hsize]),
                &self.device,
            );
            x = x.slice_assign([s.at..s.at + n, 0..hsize], cast(rows, self.dtype));
        }
        let ple = self
            .ple
            .as_ref()
            .map(|p| self.ple_inputs(p, &merge.ple_ids, &x));
        let (x, rows) = self.layers_forward(x, ple, &merge.blocks, cache, pos, logits);
        cache.finish(t);
        if logits == Logits::None {
            return Ok(None);
        }
        let x = if logits == Logits::Last && rows > 1 {
            x.slice([rows - 1..rows, 0..hsize])
        } else {
            x
        };
        let h = self.final_norm.forward(x);
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let mut out = cast(head.forward(h), DType::F32);
        if let Some(c) = self.config.final_logit_softcapping {
            out = out.div_scalar(c).tanh().mul_scalar(c);
        }
        Ok(Some(out))
    }

    /// Refuses a forward that cannot run: no ids, a cache not at `pos`, an id outside the
    /// vocabulary.
    fn check_forward(&self, ids: &[u32], cache: &KvCache, pos: usize) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::Invalid("forward needs at least one token".into()));
        }
        if cache.len() != pos {
            return Err(Error::Invalid(format!(
                "cache holds {} positions but the forward starts at {pos}",
                cache.len()
            )));
        }
        let vocab = self.config.vocab_size;
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange { id, vocab });
        }
        Ok(())
    }

    /// The decoder layers over the embedded rows `x` (per-layer inputs `ple`), from position
    /// `pos`; the hidden states out and how many rows they still hold (KV-shared layers drop
    /// the rows whose logits nobody reads).
    fn layers_forward(
        &self,
        mut x: Tensor<2>,
        mut ple: Option<Tensor<3>>,
        blocks: &[std::ops::Range<usize>],
        cache: &mut KvCache,
        pos: usize,
        logits: Logits,
    ) -> (Tensor<2>, usize) {
        let cfg = &self.config;
        let hsize = cfg.hidden_size;
        let (mut q_start, mut rows) = (pos, x.dims()[0]);
        let tables = |kind: AttnKind, start: usize, len: usize| {
            let inv = match kind {
                AttnKind::Sliding => &self.inv_freq_sliding,
                AttnKind::Full => &self.inv_freq_full,
            };
            rope_tables(inv, start, len, &self.device, self.dtype)
        };
        let masks = MaskCache::default();
        let mut rope_s = tables(AttnKind::Sliding, q_start, rows);
        let mut rope_f = tables(AttnKind::Full, q_start, rows);
        for (i, (layer, spec)) in self.layers.iter().zip(&cfg.layers).enumerate() {
            // KV-shared layers write no cache: a chunk whose logits nobody reads can stop at the
            // first of them, and otherwise only the rows whose logits are wanted matter.
            if spec.kv_donor.is_some() && logits == Logits::None {
                break;
            }
            if spec.kv_donor.is_some() && logits != Logits::All && rows > 1 {
                let keep = rows - 1;
                x = x.slice([keep..rows, 0..hsize]);
                ple = ple.map(|p| {
                    let [_, l, w] = p.dims();
                    p.slice([keep..rows, 0..l, 0..w])
                });
                q_start += keep;
                rows = 1;
                rope_s = tables(AttnKind::Sliding, q_start, 1);
                rope_f = tables(AttnKind::Full, q_start, 1);
            }
            let (cos, sin) = match spec.kind {
                AttnKind::Sliding => (&rope_s.0, &rope_s.1),
                AttnKind::Full => (&rope_f.0, &rope_f.1),
            };
            let input = AttnInput {
                masks: &masks,
                layer: i,
                spec,
                num_heads: cfg.num_heads,
                q_start,
                cos,
                sin,
                window: cfg.sliding_window,
                scale: cfg.attn_scale,
                softcap: cfg.attn_logit_softcapping,
                blocks,
                image_blocks: cfg.image_blocks,
            };
            let layer_ple = ple.as_ref().map(|p| {
                let [n, _, w] = p.dims();
                p.clone().slice([0..n, i..i + 1, 0..w]).reshape([n, w])
            });
            x = layer.forward(x, cache, &input, layer_ple);
        }
        (x, rows)
    }

    /// Per-layer inputs `[T, L, P]`: `(norm(x0·Wᵀ·H^-½) + E_ple[ids]·√P) · 2^-½`.
    fn ple_inputs(&self, p: &Ple, ids: &[u32], x0: &Tensor<2>) -> Tensor<3> {
        let cfg = &self.config;
        let spec = cfg
            .ple
            .as_ref()
            .map(|s| (s.width, s.vocab))
            .unwrap_or((1, 1));
        let (width, vocab) = spec;
        let (t, l) = (ids.len(), cfg.num_layers());
        let ids: Vec<u32> = ids
            .iter()
            .map(|&i| if (i as usize) < vocab { i } else { 0 })
            .collect();
        let tok = p
            .table
            .rows(&ids, &self.device, self.dtype)
            .mul_scalar((width as f32).sqrt())
            .reshape([t, l, width]);
        let ctx = p
            .model_projection
            .forward(x0.clone())
            .mul_scalar((cfg.hidden_size as f32).powf(-0.5))
            .reshape([t, l, width]);
        let ctx = p.projection_norm.forward(ctx);
        (ctx + tok).mul_scalar(std::f32::consts::FRAC_1_SQRT_2)
    }
}

impl Layer {
    fn forward(
        &self,
        h: Tensor<2>,
        cache: &mut KvCache,
        a: &AttnInput,
        ple: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let attn = self
            .attn
            .forward(self.input_norm.forward(h.clone()), cache, a);
        let h = h + self.post_attn_norm.forward(attn);

        let dense = self.mlp.forward(self.pre_ffn_norm.forward(h.clone()));
        let f = match &self.moe {
            None => dense,
            Some(m) => {
                let experts = m.experts.forward(m.pre_norm.forward(h.clone()), h.clone());
                m.post_dense_norm.forward(dense) + m.post_norm.forward(experts)
            }
        };
        let mut h = h + self.post_ffn_norm.forward(f);

        if let (Some(lp), Some(p)) = (&self.ple, ple) {
            let g = ops::gelu_tanh(lp.gate.forward(h.clone())) * p;
            h = h + lp.post_norm.forward(lp.projection.forward(g));
        }
        match self.scalar {
            Some(s) => h.mul_scalar(s),
            None => h,
        }
    }
}
