//! GGUF metadata → [`ModelConfig`] for the `gemma3` and `gemma4` architectures.
//!
//! The metadata is turned into the `config.json` the reference would read, filling in what
//! llama.cpp's converter leaves out the way the reference does (local RoPE base 10000, a 5:1
//! layer pattern, `query_pre_attn_scalar = head_dim`); then every layer's geometry is checked
//! against the stored tensor shapes, which are the ground truth for per-layer differences.

use serde_json::{Map, Value as Json, json};

use super::config::{AttnKind, ModelConfig};
use crate::error::{Error, Result};
use crate::loader::gguf::{GgufFile, Value};

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
    let key = |k: &str| file.get(&format!("{arch}.{k}"));
    let req_u = |k: &str| -> Result<u64> {
        key(k)
            .and_then(|v| first(v).as_u64())
            .ok_or_else(|| bad(format!("metadata key `{arch}.{k}` is missing")))
    };
    let opt_f = |k: &str| key(k).and_then(Value::as_f64);

    let n_layers = req_u("block_count")? as usize;
    let hidden = req_u("embedding_length")?;
    let heads = req_u("attention.head_count")?;
    let embd = file
        .tensors
        .get("token_embd.weight")
        .ok_or_else(|| bad("tensor `token_embd.weight` is missing".into()))?;
    let vocab = embd.shape[0];

    let mut c = Map::new();
    c.insert("hidden_size".into(), json!(hidden));
    c.insert("num_hidden_layers".into(), json!(n_layers));
    c.insert("num_attention_heads".into(), json!(heads));
    c.insert(
        "intermediate_size".into(),
        json!(req_u("feed_forward_length")?),
    );
    c.insert(
        "num_key_value_heads".into(),
        json!(
            key("attention.head_count_kv")
                .and_then(|v| first(v).as_u64())
                .unwrap_or(heads)
        ),
    );
    c.insert("vocab_size".into(), json!(vocab));
    c.insert(
        "max_position_embeddings".into(),
        json!(
            key("context_length")
                .and_then(Value::as_u64)
                .unwrap_or(8192)
        ),
    );
    c.insert(
        "rms_norm_eps".into(),
        json!(opt_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-6)),
    );
    if let Some(w) = key("attention.sliding_window").and_then(Value::as_u64) {
        c.insert("sliding_window".into(), json!(w));
    }
    if let Some(v) = opt_f("final_logit_softcapping") {
        c.insert("final_logit_softcapping".into(), json!(v));
    }
    if let Some(v) = opt_f("attention.logit_softcapping") {
        c.insert("attn_logit_softcapping".into(), json!(v));
    }
    for (k, id) in [("bos_token_id", "bos"), ("eos_token_id", "eos")] {
        if let Some(v) = file
            .get(&format!("tokenizer.ggml.{id}_token_id"))
            .and_then(Value::as_u64)
        {
            c.insert(k.into(), json!(v));
        }
    }
    let key_len = key("attention.key_length").and_then(Value::as_u64);
    let theta = opt_f("rope.freq_base").unwrap_or(1_000_000.0);
    let theta_swa = opt_f("rope.freq_base_swa").unwrap_or(10_000.0);
    let pattern = key("attention.sliding_window_pattern");

    if arch == "gemma3" {
        c.insert("model_type".into(), json!("gemma3_text"));
        let head_dim = key_len.unwrap_or(hidden / heads);
        c.insert("head_dim".into(), json!(head_dim));
        // llama.cpp scales Gemma 3 27B by (hidden / heads)^-0.5 and every other size by
        // head_dim^-0.5, which is what their query_pre_attn_scalar values amount to.
        let scalar = if n_layers == 62 {
            hidden / heads
        } else {
            head_dim
        };
        c.insert("query_pre_attn_scalar".into(), json!(scalar));
        c.insert("rope_theta".into(), json!(theta));
        c.insert("rope_local_base_freq".into(), json!(theta_swa));
        if let (Some("linear"), Some(f)) = (
            key("rope.scaling.type").and_then(Value::as_str),
            opt_f("rope.scaling.factor"),
        ) {
            c.insert(
                "rope_scaling".into(),
                json!({"rope_type": "linear", "factor": f}),
            );
        }
        c.insert("sliding_window_pattern".into(), json!(6));
    } else {
        c.insert("model_type".into(), json!("gemma4_text"));
        let swa_len = key("attention.key_length_swa").and_then(Value::as_u64);
        c.insert("head_dim".into(), json!(swa_len.or(key_len).unwrap_or(256)));
        let global_head_dim = key_len.unwrap_or(512);
        c.insert("global_head_dim".into(), json!(global_head_dim));
        c.insert(
            "rope_parameters".into(),
            json!({
                "sliding_attention": {"rope_type": "default", "rope_theta": theta_swa},
                "full_attention": {"rope_type": "proportional",
                                   "partial_rotary_factor": rotated_fraction(file, global_head_dim)?,
                                   "rope_theta": theta},
            }),
        );
        if let Some(n) = key("attention.shared_kv_layers").and_then(Value::as_u64) {
            c.insert("num_kv_shared_layers".into(), json!(n));
        }
        if let Some(p) = key("embedding_length_per_layer_input").and_then(Value::as_u64) {
            c.insert("hidden_size_per_layer_input".into(), json!(p));
            if let Some(t) = file.tensors.get("per_layer_token_embd.weight") {
                c.insert("vocab_size_per_layer_input".into(), json!(t.shape[0]));
            }
        }
        if let Some(e) = key("expert_count")
            .and_then(Value::as_u64)
            .filter(|&e| e > 0)
        {
            c.insert("enable_moe_block".into(), json!(true));
            c.insert("num_experts".into(), json!(e));
            c.insert("top_k_experts".into(), json!(req_u("expert_used_count")?));
            c.insert(
                "moe_intermediate_size".into(),
                json!(req_u("expert_feed_forward_length")?),
            );
        }
    }
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
