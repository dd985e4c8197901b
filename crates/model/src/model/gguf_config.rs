//! GGUF metadata → [`ModelConfig`] for the `gemma3` and `gemma4` architectures.
//!
//! The metadata is turned into the `config.json` the reference would read, filling in what
//! llama.cpp's converter leaves out the way the reference does (local RoPE base 10000, a 5:1
//! layer pattern, `query_pre_attn_scalar = head_dim`); then every layer's geometry is checked
//! against the stored tensor shapes, which are the ground truth for per-layer differences.

use serde_json::{Map, Value as Json, json};

use super::config::{AttnKind, ModelConfig};
use crate::error::{Error, Result};
use crate::weights::gguf::{GgufFile, Value};

/// A GGUF file's metadata under its architecture's prefix.
struct Meta<'a> {
    file: &'a GgufFile,
    arch: String,
}

impl Meta<'_> {
    fn bad(&self, msg: String) -> Error {
        Error::config(self.file.path(), msg)
    }

    fn key(&self, k: &str) -> Option<&Value> {
        self.file.get(&format!("{}.{k}", self.arch))
    }

    fn u64(&self, k: &str) -> Option<u64> {
        self.key(k).and_then(Value::as_u64)
    }

    fn f64(&self, k: &str) -> Option<f64> {
        self.key(k).and_then(Value::as_f64)
    }

    /// A required count (the first of a per-layer array).
    fn req_u(&self, k: &str) -> Result<u64> {
        self.key(k)
            .and_then(|v| first(v).as_u64())
            .ok_or_else(|| self.bad(format!("metadata key `{}.{k}` is missing", self.arch)))
    }
}

/// Resolves the model config of a GGUF file.
pub fn model_config(file: &GgufFile) -> Result<ModelConfig> {
    let bad = |msg: String| Error::config(file.path(), msg);
    let arch = file
        .get("general.architecture")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no general.architecture in the metadata".into()))?
        .to_string();
    if arch != "gemma3" && arch != "gemma4" {
        return Err(bad(format!(
            "architecture `{arch}` is not supported: gemma-chat runs gemma3 and gemma4 GGUF files"
        )));
    }
    let m = Meta { file, arch };
    for k in ["block_count", "embedding_length", "attention.head_count"] {
        if m.req_u(k)? == 0 {
            return Err(m.bad(format!("metadata key `{}.{k}` is 0", m.arch)));
        }
    }
    let mut c = common_keys(&m)?;
    if m.arch == "gemma3" {
        gemma3_keys(&m, &mut c)?;
    } else {
        gemma4_keys(&m, &mut c)?;
    }
    let pattern = m.key("attention.sliding_window_pattern");
    if let Some(Value::Array(flags)) = pattern {
        // One flag per layer: true where the layer uses sliding-window attention.
        let types: Vec<&str> = flags
            .iter()
            .map(|f| match f {
                Value::Bool(true) => "sliding_attention",
                _ => "full_attention",
            })
            .collect();
        c.insert("layer_types".into(), json!(types));
    } else if let Some(p) = pattern.and_then(Value::as_u64) {
        c.insert("sliding_window_pattern".into(), json!(p));
    }

    let mut cfg = ModelConfig::from_json(&Json::Object(c)).map_err(bad)?;
    // llama.cpp's converter stores Gemma 3 norm weights with the +1 already added.
    cfg.norm_offset = 0.0;
    fit_layers_to_tensors(file, &mut cfg)?;
    Ok(cfg)
}

/// The `config.json` keys both architectures store the same way.
fn common_keys(m: &Meta) -> Result<Map<String, Json>> {
    let heads = m.req_u("attention.head_count")?;
    let embd = m
        .file
        .tensors
        .get("token_embd.weight")
        .ok_or_else(|| m.bad("tensor `token_embd.weight` is missing".into()))?;
    let mut c = Map::new();
    c.insert("hidden_size".into(), json!(m.req_u("embedding_length")?));
    c.insert("num_hidden_layers".into(), json!(m.req_u("block_count")?));
    c.insert("num_attention_heads".into(), json!(heads));
    c.insert(
        "intermediate_size".into(),
        json!(m.req_u("feed_forward_length")?),
    );
    let kv = m
        .key("attention.head_count_kv")
        .and_then(|v| first(v).as_u64());
    c.insert("num_key_value_heads".into(), json!(kv.unwrap_or(heads)));
    c.insert("vocab_size".into(), json!(embd.shape[0]));
    c.insert(
        "max_position_embeddings".into(),
        json!(m.u64("context_length").unwrap_or(8192)),
    );
    c.insert(
        "rms_norm_eps".into(),
        json!(m.f64("attention.layer_norm_rms_epsilon").unwrap_or(1e-6)),
    );
    if let Some(w) = m.u64("attention.sliding_window") {
        c.insert("sliding_window".into(), json!(w));
    }
    if let Some(v) = m.f64("final_logit_softcapping") {
        c.insert("final_logit_softcapping".into(), json!(v));
    }
    if let Some(v) = m.f64("attention.logit_softcapping") {
        c.insert("attn_logit_softcapping".into(), json!(v));
    }
    for (k, id) in [
        ("bos_token_id", "bos"),
        ("eos_token_id", "eos"),
        ("pad_token_id", "padding"),
    ] {
        if let Some(v) = m
            .file
            .get(&format!("tokenizer.ggml.{id}_token_id"))
            .and_then(Value::as_u64)
        {
            c.insert(k.into(), json!(v));
        }
    }
    Ok(c)
}

/// Gemma 3: head size, attention scale, RoPE bases and scaling, the 5:1 pattern.
fn gemma3_keys(m: &Meta, c: &mut Map<String, Json>) -> Result<()> {
    let (hidden, heads) = (
        m.req_u("embedding_length")?,
        m.req_u("attention.head_count")?,
    );
    let n_layers = m.req_u("block_count")?;
    c.insert("model_type".into(), json!("gemma3_text"));
    let head_dim = m.u64("attention.key_length").unwrap_or(hidden / heads);
    c.insert("head_dim".into(), json!(head_dim));
    // llama.cpp scales Gemma 3 27B by (hidden / heads)^-0.5 and every other size by
    // head_dim^-0.5, which is what their query_pre_attn_scalar values amount to.
    let scalar = if n_layers == 62 {
        hidden / heads
    } else {
        head_dim
    };
    c.insert("query_pre_attn_scalar".into(), json!(scalar));
    c.insert(
        "rope_theta".into(),
        json!(m.f64("rope.freq_base").unwrap_or(1_000_000.0)),
    );
    c.insert(
        "rope_local_base_freq".into(),
        json!(m.f64("rope.freq_base_swa").unwrap_or(10_000.0)),
    );
    if let (Some("linear"), Some(f)) = (
        m.key("rope.scaling.type").and_then(Value::as_str),
        m.f64("rope.scaling.factor"),
    ) {
        c.insert(
            "rope_scaling".into(),
            json!({"rope_type": "linear", "factor": f}),
        );
    }
    c.insert("sliding_window_pattern".into(), json!(6));
    Ok(())
}

/// Gemma 4: the two head sizes, proportional RoPE, KV sharing, per-layer embeddings, experts.
fn gemma4_keys(m: &Meta, c: &mut Map<String, Json>) -> Result<()> {
    c.insert("model_type".into(), json!("gemma4_text"));
    let key_len = m.u64("attention.key_length");
    let swa_len = m.u64("attention.key_length_swa");
    c.insert("head_dim".into(), json!(swa_len.or(key_len).unwrap_or(256)));
    let global_head_dim = key_len.unwrap_or(512);
    c.insert("global_head_dim".into(), json!(global_head_dim));
    let theta = m.f64("rope.freq_base").unwrap_or(1_000_000.0);
    let theta_swa = m.f64("rope.freq_base_swa").unwrap_or(10_000.0);
    c.insert(
        "rope_parameters".into(),
        json!({
            "sliding_attention": {"rope_type": "default", "rope_theta": theta_swa},
            "full_attention": {"rope_type": "proportional",
                               "partial_rotary_factor": rotated_fraction(m.file, global_head_dim)?,
                               "rope_theta": theta},
        }),
    );
    if let Some(n) = m.u64("attention.shared_kv_layers") {
        c.insert("num_kv_shared_layers".into(), json!(n));
    }
    if let Some(p) = m.u64("embedding_length_per_layer_input") {
        c.insert("hidden_size_per_layer_input".into(), json!(p));
        if let Some(t) = m.file.tensors.get("per_layer_token_embd.weight") {
            c.insert("vocab_size_per_layer_input".into(), json!(t.shape[0]));
        }
    }
    if let Some(e) = m.u64("expert_count").filter(|&e| e > 0) {
        c.insert("enable_moe_block".into(), json!(true));
        c.insert("num_experts".into(), json!(e));
        c.insert("top_k_experts".into(), json!(m.req_u("expert_used_count")?));
        c.insert(
            "moe_intermediate_size".into(),
            json!(m.req_u("expert_feed_forward_length")?),
        );
    }
    Ok(())
}

/// The fraction of a full layer's frequency pairs that rotate. llama.cpp encodes proportional
/// RoPE as a `rope_freqs` tensor of factors: 1 for rotated pairs, 1e30 for the others.
fn rotated_fraction(file: &GgufFile, head_dim: u64) -> Result<f64> {
    let Some(t) = file.dequantize("rope_freqs.weight")? else {
        return Ok(0.25);
    };
    let rotated = t.data.iter().filter(|&&f| f < 1e20).count();
    Ok((2 * rotated) as f64 / head_dim.max(1) as f64)
}

/// A per-layer array's first element, or the value itself.
fn first(v: &Value) -> &Value {
    match v {
        Value::Array(a) if !a.is_empty() => &a[0],
        other => other,
    }
}

/// Takes each layer's head dim, KV heads, V projection and MLP width from the stored shapes.
fn fit_layers_to_tensors(file: &GgufFile, cfg: &mut ModelConfig) -> Result<()> {
    let shape = |name: String| file.tensors.get(&name).map(|t| t.shape.clone());
    for (i, layer) in cfg.layers.iter_mut().enumerate() {
        if let Some(s) = shape(format!("blk.{i}.attn_q_norm.weight")) {
            layer.head_dim = s[0];
        }
        if layer.kv_donor.is_none()
            && let Some(s) = shape(format!("blk.{i}.attn_k.weight"))
            && layer.head_dim > 0
        {
            layer.kv_heads = s[0] / layer.head_dim;
        }
        layer.has_v_proj = shape(format!("blk.{i}.attn_v.weight")).is_some();
        if !layer.has_v_proj && layer.kind == AttnKind::Sliding && layer.kv_donor.is_none() {
            return Err(Error::config(
                file.path(),
                format!("sliding layer {i} has no attn_v tensor"),
            ));
        }
        if let Some(s) = shape(format!("blk.{i}.ffn_gate.weight")) {
            layer.mlp_width = s[0];
        }
    }
    Ok(())
}
