//! A checkpoint's vision side read from its `config.json`: which tower (`vision_config`'s
//! `model_type`: the ViT of E2B/E4B and 26B/31B, or the 12B's encoder-free embedder), its
//! geometry, and the image ids of the prompt layout.

use serde_json::{Map, Value};

/// The ViT tower (`gemma4_vision`).
#[derive(Debug, Clone, PartialEq)]
pub struct VitSpec {
    /// Width of the tower.
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Width of the GeGLU MLP.
    pub intermediate: usize,
    /// Rows of each axis of the learned position table.
    pub positions: usize,
    /// θ of the 2-D RoPE.
    pub theta: f32,
    /// Every projection clamps its input and output (`use_clipped_linears`).
    pub clipped: bool,
    /// `(h − std_bias) · std_scale` after pooling (`standardize`).
    pub standardize: bool,
}

/// The 12B's encoder-free embedder (`gemma4_unified_vision`).
#[derive(Debug, Clone, PartialEq)]
pub struct UnifiedSpec {
    /// Width of the embedding (`mm_embed_dim`).
    pub width: usize,
    /// Rows of the factorized position table (`mm_posemb_size`).
    pub positions: usize,
}

/// Which tower a checkpoint has.
#[derive(Debug, Clone, PartialEq)]
pub enum TowerSpec {
    /// A ViT with 3 × 3 pooling.
    Vit(VitSpec),
    /// One dense embedding per 48-pixel patch.
    Unified(UnifiedSpec),
}

/// Everything about a checkpoint's images.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionSpec {
    /// The tower.
    pub tower: TowerSpec,
    /// Pixels a patch side (16).
    pub patch: usize,
    /// Patches a pooled token side (3).
    pub pool: usize,
    /// ε of the tower's RMSNorms and of the projector's.
    pub eps: f64,
    /// Width of the text decoder, which the projector maps to.
    pub text_hidden: usize,
    /// The soft-token placeholder id.
    pub image_token_id: u32,
    /// The id before an image's placeholders.
    pub boi_token_id: u32,
    /// The id after them.
    pub eoi_token_id: u32,
}

impl VisionSpec {
    /// The vision side of a parsed `config.json`, `None` when it has no `vision_config`. The
    /// error names the offending field.
    pub fn from_json(root: &Value) -> Result<Option<Self>, String> {
        Self::read(root).map_err(|msg| crate::model::config::written_by(root, msg))
    }

    fn read(root: &Value) -> Result<Option<Self>, String> {
        let Some(root) = root.as_object() else {
            return Err("the top level is not an object".into());
        };
        let Some(v) = root.get("vision_config").and_then(Value::as_object) else {
            return Ok(None);
        };
        crate::model::config::one_geometry(v, "vision_config")?;
        let text = root
            .get("text_config")
            .and_then(Value::as_object)
            .ok_or("a vision_config without a text_config")?;
        let get = |m: &Map<String, Value>, key: &str, default: Option<u64>, at: &str| {
            match m.get(key) {
                Some(Value::Null) | None => default,
                Some(v) => v.as_u64(),
            }
            .filter(|&n| n > 0 && n < 1 << 24)
            .map(|n| n as usize)
            .ok_or_else(|| format!("`{at}{key}` is missing or not a positive integer"))
        };
        let num = |key: &str, default: u64| get(v, key, Some(default), "vision_config.");
        let id = |key: &str, default: u64| get(root, key, Some(default), "").map(|n| n as u32);
        let flag = |key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
        let kind = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        let tower = if kind.contains("unified") {
            TowerSpec::Unified(UnifiedSpec {
                width: num("mm_embed_dim", 3840)?,
                positions: num("mm_posemb_size", 1120)?,
            })
        } else {
            let heads = num("num_attention_heads", 12)?;
            let hidden = num("hidden_size", 768)?;
            let theta = v
                .get("rope_parameters")
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(100.0) as f32;
            TowerSpec::Vit(VitSpec {
                hidden,
                layers: num("num_hidden_layers", 16)?,
                heads,
                kv_heads: num("num_key_value_heads", heads as u64)?,
                head_dim: num("head_dim", (hidden / heads) as u64)?,
                intermediate: num("intermediate_size", 3072)?,
                positions: num("position_embedding_size", 10 * 1024)?,
                theta,
                clipped: flag("use_clipped_linears"),
                standardize: flag("standardize"),
            })
        };
        if let TowerSpec::Vit(s) = &tower
            && (s.heads % s.kv_heads != 0 || s.head_dim % 4 != 0)
        {
            return Err(format!(
                "vision_config: {} heads over {} key/value heads of width {} is not a Gemma 4 tower",
                s.heads, s.kv_heads, s.head_dim
            ));
        }
        Ok(Some(Self {
            tower,
            patch: num("patch_size", 16)?,
            pool: num("pooling_kernel_size", 3)?,
            eps: v
                .get("rms_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-6),
            text_hidden: get(text, "hidden_size", None, "text_config.")?,
            image_token_id: id("image_token_id", 258_880)?,
            boi_token_id: id("boi_token_id", 255_999)?,
            eoi_token_id: id("eoi_token_id", 258_882)?,
        }))
    }

    /// Pixels a side of the patches the tower takes: 16 for a ViT, 48 for the 12B's embedder.
    pub fn input_side(&self) -> usize {
        match self.tower {
            TowerSpec::Vit(_) => self.patch,
            TowerSpec::Unified(_) => self.patch * self.pool,
        }
    }
}
