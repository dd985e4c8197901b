//! The model configuration: parses a Hugging Face `config.json` (Gemma 3 or Gemma 4, wrapper or
//! text-only layout) into one resolved [`ModelConfig`] with a [`LayerSpec`] per layer.
//!
//! Everything the forward pass branches on is decided here, once. Required fields have no silent
//! defaults: a missing one is an [`crate::error::Error::Config`] naming it.

/// Which Gemma generation a checkpoint belongs to; decides the norm offset, attention scale and
/// V normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `gemma3` / `gemma3_text`: `(1 + w)` norms, `query_pre_attn_scalar`, no V norm.
    Gemma3,
    /// `gemma4` / `gemma4_text` / `gemma4_unified*`: plain `w` norms, scale 1, V norm.
    Gemma4,
}

/// The attention type of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    /// Causal attention restricted to the last `sliding_window` positions.
    Sliding,
    /// Causal attention over the whole history.
    Full,
}

/// How a layer type turns positions into rotation angles.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    /// Base θ.
    pub theta: f64,
    /// Positions are divided by this (Gemma 3 `linear` scaling); 1 otherwise.
    pub factor: f64,
    /// Fraction of the head's frequency pairs that rotate (`proportional` RoPE); 1 otherwise.
    pub partial_rotary_factor: f64,
}

impl RopeSpec {
    /// Inverse frequencies for a head of `head_dim`: `head_dim / 2` values, zero past the rotated
    /// fraction. The exponent is divided by the whole head dim, also for proportional RoPE.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        let half = head_dim / 2;
        let rotated = ((self.partial_rotary_factor * head_dim as f64) / 2.0).floor() as usize;
        (0..half)
            .map(|j| {
                if j < rotated.min(half) {
                    let exp = (2 * j) as f64 / head_dim as f64;
                    // Computed as HF does: f32 powers, then divided by the scaling factor.
                    let base = (self.theta as f32).powf(exp as f32);
                    ((1.0 / base) as f64 / self.factor) as f32
                } else {
                    0.0
                }
            })
            .collect()
    }
}

/// Everything one decoder layer needs to know about its own geometry.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    /// Sliding or full attention.
    pub kind: AttnKind,
    /// Per-head dimension of this layer.
    pub head_dim: usize,
    /// Number of K/V heads of this layer.
    pub kv_heads: usize,
    /// False on full layers with `attention_k_eq_v`: V is the raw K projection.
    pub has_v_proj: bool,
    /// For KV-shared layers, the earlier layer whose cache this one reads.
    pub kv_donor: Option<usize>,
    /// Width of the dense MLP.
    pub mlp_width: usize,
}

/// How the soft tokens of one image attend each other, as transformers builds the mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageBlocks {
    /// Causally, as text (`use_bidirectional_attention: null`: E2B, E4B).
    Causal,
    /// Both ways on sliding layers, within the window; full layers causal (`"vision"` on
    /// `gemma4`: 26B, 31B): `window AND (causal OR same image)`.
    Sliding,
    /// Both ways on every layer, the window notwithstanding (`"vision"` on `gemma4_unified`, the
    /// 12B, whose masks OR the image blocks last): `(causal AND window) OR same image`.
    Every,
}

/// Per-layer embeddings (Gemma 4 E2B/E4B).
#[derive(Debug, Clone, PartialEq)]
pub struct PleSpec {
    /// Width `P` of each layer's slice.
    pub width: usize,
    /// Rows of `embed_tokens_per_layer`.
    pub vocab: usize,
}

/// The mixture-of-experts branch (Gemma 4 26B-A4B).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeSpec {
    /// Number of experts `E`.
    pub num_experts: usize,
    /// Experts chosen per token.
    pub top_k: usize,
    /// Width of one expert's MLP.
    pub width: usize,
}

/// A fully resolved text-decoder configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Gemma 3 or Gemma 4.
    pub family: Family,
    /// The text config's `model_type`.
    pub model_type: String,
    /// Rows of the embedding table and LM head.
    pub vocab_size: usize,
    /// Residual width `H`.
    pub hidden_size: usize,
    /// Query heads (same on every layer).
    pub num_heads: usize,
    /// Sliding window `W`, keys included the query itself.
    pub sliding_window: usize,
    /// ε inside every RMSNorm.
    pub rms_norm_eps: f64,
    /// `c` of the final `c·tanh(x/c)`, if any.
    pub final_logit_softcapping: Option<f32>,
    /// Softcap on attention scores, if any (no released Gemma 3/4 sets it).
    pub attn_logit_softcapping: Option<f32>,
    /// Multiplier on `q·kᵀ`.
    pub attn_scale: f32,
    /// Added to every norm weight at load time: 1 for Gemma 3, 0 for Gemma 4.
    pub norm_offset: f32,
    /// Whether V is RMS-normalised (Gemma 4).
    pub v_norm: bool,
    /// RoPE of sliding layers.
    pub rope_sliding: RopeSpec,
    /// RoPE of full layers.
    pub rope_full: RopeSpec,
    /// Per-layer embeddings, when present.
    pub ple: Option<PleSpec>,
    /// MoE branch, when present.
    pub moe: Option<MoeSpec>,
    /// One entry per decoder layer.
    pub layers: Vec<LayerSpec>,
    /// Trained context length.
    pub max_position_embeddings: usize,
    /// Whether the LM head is the embedding table.
    pub tie_word_embeddings: bool,
    /// Beginning-of-sequence id.
    pub bos_token_id: u32,
    /// End ids named by `config.json` (generation_config.json may override).
    pub eos_token_ids: Vec<u32>,
    /// How the soft tokens of one image see each other ([`ImageBlocks`]).
    pub image_blocks: ImageBlocks,
    /// `pad_token_id`: the per-layer embeddings' token at image positions.
    pub pad_token_id: u32,
}

impl ModelConfig {
    /// Number of decoder layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }
}

mod json;
mod json_specs;
mod per_layer;

pub(crate) use json::{one_geometry, token_ids, written_by};

#[cfg(test)]
mod tests;
