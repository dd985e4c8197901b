//! Reading a `config.json` into a [`ModelConfig`]: the text tower's fields (nested in
//! `text_config` by multimodal wrappers) through [`Fields`], with an error that names the
//! offending field; each layer's geometry, RoPE, PLE and MoE are `json_specs.rs`'s.

use std::path::Path;

use serde_json::{Map, Value};

use super::json_specs::{layer_kinds, layer_specs, moe_spec, ple_spec, rope_specs};
use super::{AttnKind, Family, ImageBlocks, ModelConfig};
use crate::error::{Error, Result};

impl ModelConfig {
    /// Reads and resolves a `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| Error::config(path, format!("not valid JSON: {e}")))?;
        Self::from_json(&value).map_err(|msg| Error::config(path, msg))
    }

    /// Resolves a parsed `config.json`. The error is a message naming the offending field, and
    /// the transformers version that wrote the file when it says.
    pub fn from_json(root: &Value) -> std::result::Result<Self, String> {
        Self::resolve(root).map_err(|msg| written_by(root, msg))
    }

    fn resolve(root: &Value) -> std::result::Result<Self, String> {
        let root = root.as_object().ok_or("the top level is not an object")?;
        refuse_assistant(root)?;
        // Multimodal wrappers nest the text tower's fields in `text_config`.
        let (text, where_) = match root.get("text_config") {
            Some(Value::Object(t)) => (t, "text_config."),
            _ => (root, ""),
        };
        let f = Fields { map: text, where_ };
        let model_type = model_type_of(&f, root)?;
        let family = family_of(&model_type)?;

        refuse_bias(&f)?;
        let hidden_size = f.req_usize("hidden_size")?;
        let num_layers = layer_count(&f)?;
        let num_heads = f.req_usize("num_attention_heads")?;
        let vocab_size = f.req_usize("vocab_size")?;
        let rms_norm_eps = f.f64("rms_norm_eps")?.unwrap_or(1e-6);
        let layer_kinds = layer_kinds(&f, family, num_layers)?;
        let sliding_window = if layer_kinds.contains(&AttnKind::Sliding) {
            f.req_usize("sliding_window")?
        } else {
            f.usize("sliding_window")?.unwrap_or(usize::MAX)
        };

        let (rope_sliding, rope_full) = rope_specs(&f, family)?;
        let layers = layer_specs(&f, family, &layer_kinds)?;
        let (ple, moe) = (ple_spec(&f, vocab_size)?, moe_spec(&f)?);

        let attn_scale = attn_scale(&f, family)?;
        let final_logit_softcapping = f.f64("final_logit_softcapping")?.map(|v| v as f32);
        let attn_logit_softcapping = f.f64("attn_logit_softcapping")?.map(|v| v as f32);
        let tie_word_embeddings = f
            .bool("tie_word_embeddings")?
            .or(root.get("tie_word_embeddings").and_then(Value::as_bool))
            .unwrap_or(true);
        let eos_token_ids = token_ids(text.get("eos_token_id"))
            .or_else(|| token_ids(root.get("eos_token_id")))
            .unwrap_or_else(|| vec![1]);
        let bos_token_id = f.usize("bos_token_id")?.unwrap_or(2);
        let pad_token_id = f.usize("pad_token_id")?.unwrap_or(0);
        let image_blocks = image_blocks(&f, &model_type)?;

        let cfg = ModelConfig {
            family,
            model_type,
            vocab_size,
            hidden_size,
            num_heads,
            sliding_window,
            rms_norm_eps,
            final_logit_softcapping,
            attn_logit_softcapping,
            attn_scale,
            norm_offset: if family == Family::Gemma3 { 1.0 } else { 0.0 },
            v_norm: family == Family::Gemma4,
            rope_sliding,
            rope_full,
            ple,
            moe,
            layers,
            max_position_embeddings: f.usize("max_position_embeddings")?.unwrap_or(131_072),
            tie_word_embeddings,
            bos_token_id: bos_token_id.min(u32::MAX as usize) as u32,
            eos_token_ids,
            image_blocks,
            pad_token_id: pad_token_id.min(vocab_size.saturating_sub(1)) as u32,
        };
        check_limits(&cfg, bos_token_id)?;
        Ok(cfg)
    }
}

/// The text tower's `model_type` (a wrapper's own when the text config has none).
fn model_type_of(
    f: &Fields,
    root: &serde_json::Map<String, Value>,
) -> std::result::Result<String, String> {
    f.str("model_type")?
        .or_else(|| {
            root.get("model_type")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .ok_or_else(|| f.missing("model_type"))
}

/// Refuses attention biases, which no Gemma release has.
fn refuse_bias(f: &Fields) -> std::result::Result<(), String> {
    if f.bool("attention_bias")?.unwrap_or(false) {
        return Err(format!(
            "{}attention_bias = true is not supported (no Gemma release has biases)",
            f.where_
        ));
    }
    Ok(())
}

/// `num_hidden_layers`, within what gemma-chat takes.
fn layer_count(f: &Fields) -> std::result::Result<usize, String> {
    let n = f.req_usize("num_hidden_layers")?;
    if !(1..=MAX_LAYERS).contains(&n) {
        return Err(format!(
            "{}num_hidden_layers = {n} is out of range: 1 to {MAX_LAYERS}",
            f.where_
        ));
    }
    Ok(n)
}

/// Refuses a Gemma 4 assistant (drafter) checkpoint, which cannot chat on its own.
fn refuse_assistant(root: &serde_json::Map<String, Value>) -> std::result::Result<(), String> {
    match root.get("model_type").and_then(Value::as_str) {
        Some(kind) if kind.contains("assistant") => Err(format!(
            "model_type `{kind}` is a Gemma 4 assistant (drafter): it drafts tokens for a \
             target model from that model's keys and values and cannot chat on its own; \
             load the target model instead"
        )),
        _ => Ok(()),
    }
}

/// The family a `model_type` names.
fn family_of(model_type: &str) -> std::result::Result<Family, String> {
    if model_type.starts_with("gemma3") {
        Ok(Family::Gemma3)
    } else if model_type.starts_with("gemma4") {
        Ok(Family::Gemma4)
    } else {
        Err(format!(
            "model_type `{model_type}` is not supported (expected gemma3* or gemma4*)"
        ))
    }
}

/// The attention's scale: Gemma 4's 1; Gemma 3's `query_pre_attn_scalar^-½` (HF's
/// Gemma3TextConfig default 256, not head_dim).
fn attn_scale(f: &Fields, family: Family) -> std::result::Result<f32, String> {
    Ok(match family {
        Family::Gemma4 => 1.0,
        Family::Gemma3 => {
            let s = f.f64("query_pre_attn_scalar")?.unwrap_or(256.0);
            (s.powf(-0.5)) as f32
        }
    })
}

/// How pictures attend: Gemma 3 writes `false`; Gemma 4 `null` or "vision" (every layer on the
/// 12B's unified tower, the sliding ones elsewhere); `true`/"all" are embedding models.
fn image_blocks(f: &Fields, model_type: &str) -> std::result::Result<ImageBlocks, String> {
    match f.get("use_bidirectional_attention") {
        None | Some(Value::Bool(false)) => Ok(ImageBlocks::Causal),
        Some(Value::String(v)) if v == "vision" && model_type.contains("unified") => {
            Ok(ImageBlocks::Every)
        }
        Some(Value::String(v)) if v == "vision" => Ok(ImageBlocks::Sliding),
        Some(other) => Err(format!(
            "{}use_bidirectional_attention = {other} is not supported (a chat model has null, \
             false or \"vision\")",
            f.where_
        )),
    }
}

/// `msg`, naming the transformers version that wrote the config when it says (keys and their
/// defaults move between releases).
pub(crate) fn written_by(root: &Value, msg: String) -> String {
    let version = root
        .get("transformers_version")
        .or_else(|| root.get("text_config")?.get("transformers_version"))
        .and_then(Value::as_str);
    match version {
        Some(v) => format!("{msg} (config.json written by transformers {v})"),
        None => msg,
    }
}

/// Refuses a tower config (`vision_config`, `audio_config`) that gives its layers their own
/// geometry in `per_layer_config`: transformers' towers read the global keys only (a per-layer
/// override makes them refuse the config), and a Gemma 4 tower has one geometry throughout.
pub(crate) fn one_geometry(
    tower: &Map<String, Value>,
    key: &str,
) -> std::result::Result<(), String> {
    match tower.get("per_layer_config").and_then(Value::as_object) {
        Some(m) if !m.is_empty() => Err(format!(
            "`{key}.per_layer_config` gives layers their own geometry: Gemma 4's tower has one \
             for every layer"
        )),
        _ => Ok(()),
    }
}

/// Most decoder layers a config may declare (the largest Gemma has 62).
const MAX_LAYERS: usize = 1024;

/// Refuses geometry no model has, before anything is allocated from it: zero or absurd sizes,
/// a BOS or end id outside the vocabulary, a zero context, window or RoPE factor.
fn check_limits(c: &ModelConfig, bos: usize) -> std::result::Result<(), String> {
    let range = |what: &str, v: usize, lo: usize, hi: usize| {
        if (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(format!("{what} = {v} is out of range: {lo} to {hi}"))
        }
    };
    range("vocab_size", c.vocab_size, 1, 1 << 24)?;
    range("hidden_size", c.hidden_size, 1, 1 << 17)?;
    range("num_attention_heads", c.num_heads, 1, 1 << 12)?;
    range(
        "max_position_embeddings",
        c.max_position_embeddings,
        1,
        1 << 24,
    )?;
    range("sliding_window", c.sliding_window, 1, usize::MAX)?;
    for (i, l) in c.layers.iter().enumerate() {
        range(&format!("layer {i}: head_dim"), l.head_dim, 1, 1 << 13)?;
        range(
            &format!("layer {i}: key/value heads"),
            l.kv_heads,
            1,
            1 << 12,
        )?;
        range(
            &format!("layer {i}: intermediate_size"),
            l.mlp_width,
            1,
            1 << 20,
        )?;
    }
    if let Some(m) = &c.moe {
        range("num_experts", m.num_experts, 1, 1 << 12)?;
        range("top_k_experts", m.top_k, 1, m.num_experts)?;
        range("moe_intermediate_size", m.width, 1, 1 << 20)?;
    }
    if let Some(p) = &c.ple {
        range("hidden_size_per_layer_input", p.width, 1, 1 << 14)?;
        range("vocab_size_per_layer_input", p.vocab, 1, 1 << 24)?;
    }
    if bos >= c.vocab_size {
        return Err(format!(
            "bos_token_id = {bos} is outside the vocabulary (vocab_size = {})",
            c.vocab_size
        ));
    }
    if let Some(id) = c
        .eos_token_ids
        .iter()
        .find(|&&id| id as usize >= c.vocab_size)
    {
        return Err(format!(
            "eos_token_id {id} is outside the vocabulary (vocab_size = {})",
            c.vocab_size
        ));
    }
    for (what, r) in [("sliding", &c.rope_sliding), ("full", &c.rope_full)] {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        let fine = ok(r.theta)
            && ok(r.factor)
            && ok(r.partial_rotary_factor)
            && r.partial_rotary_factor <= 1.0;
        if !fine {
            return Err(format!(
                "the {what} layers' RoPE (theta {}, factor {}, partial_rotary_factor {}) must be \
                 positive, the fraction at most 1",
                r.theta, r.factor, r.partial_rotary_factor
            ));
        }
    }
    Ok(())
}

/// Reads `eos_token_id`, which is an integer or a list of integers.
pub(crate) fn token_ids(v: Option<&Value>) -> Option<Vec<u32>> {
    match v? {
        Value::Number(n) => n.as_u64().map(|n| vec![n as u32]),
        Value::Array(a) => Some(
            a.iter()
                .filter_map(Value::as_u64)
                .map(|n| n as u32)
                .collect(),
        ),
        _ => None,
    }
}

/// Typed access to one JSON object, with errors that name the field and where it was looked for.
pub(super) struct Fields<'a> {
    pub(super) map: &'a Map<String, Value>,
    pub(super) where_: &'static str,
}

impl Fields<'_> {
    fn missing(&self, key: &str) -> String {
        format!("required field `{}{key}` is missing", self.where_)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        match self.map.get(key) {
            Some(Value::Null) | None => None,
            Some(v) => Some(v),
        }
    }

    fn wrong(&self, key: &str, what: &str, v: &Value) -> String {
        format!("field `{}{key}` must be {what}, found {v}", self.where_)
    }

    pub(super) fn usize(&self, key: &str) -> std::result::Result<Option<usize>, String> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| self.wrong(key, "a non-negative integer", v))
            })
            .transpose()
    }

    pub(super) fn req_usize(&self, key: &str) -> std::result::Result<usize, String> {
        self.usize(key)?.ok_or_else(|| self.missing(key))
    }

    pub(super) fn f64(&self, key: &str) -> std::result::Result<Option<f64>, String> {
        self.get(key)
            .map(|v| v.as_f64().ok_or_else(|| self.wrong(key, "a number", v)))
            .transpose()
    }

    pub(super) fn bool(&self, key: &str) -> std::result::Result<Option<bool>, String> {
        self.get(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| self.wrong(key, "true or false", v))
            })
            .transpose()
    }

    fn str(&self, key: &str) -> std::result::Result<Option<String>, String> {
        self.get(key)
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| self.wrong(key, "a string", v))
            })
            .transpose()
    }
}
