//! The per-layer parts of a `config.json` ([`layer_kinds`], [`layer_specs`]) and the RoPE, PLE
//! and MoE specs ([`rope_specs`], [`ple_spec`], [`moe_spec`]), read through [`Fields`] with
//! errors that name the field; `json.rs` puts them together into a [`ModelConfig`].

use serde_json::{Map, Value};

use super::json::Fields;
use super::per_layer::attention_geometry;
use super::{AttnKind, Family, LayerSpec, MoeSpec, PleSpec, RopeSpec};

/// Each layer's geometry: head size and KV heads (by transformers' rule, in `per_layer`), KV
/// sharing and MLP width.
pub(super) fn layer_specs(
    f: &Fields,
    family: Family,
    kinds: &[AttnKind],
) -> std::result::Result<Vec<LayerSpec>, String> {
    let num_layers = kinds.len();
    let num_heads = f.req_usize("num_attention_heads")?;
    let intermediate = f.req_usize("intermediate_size")?;
    let k_eq_v = f.bool("attention_k_eq_v")?.unwrap_or(false);
    let geometry = attention_geometry(f, family, kinds)?;
    let kv_shared = f.usize("num_kv_shared_layers")?.unwrap_or(0);
    if kv_shared > num_layers {
        return Err(format!(
            "{}num_kv_shared_layers = {kv_shared} exceeds num_hidden_layers = {num_layers}",
            f.where_
        ));
    }
    let first_shared = num_layers - kv_shared;
    let double_wide = f.bool("use_double_wide_mlp")?.unwrap_or(false);
    let mut layers = Vec::with_capacity(num_layers);
    for (i, (&kind, &(hd, nkv))) in kinds.iter().zip(&geometry).enumerate() {
        if nkv == 0 || num_heads % nkv != 0 {
            return Err(format!(
                "layer {i}: {num_heads} attention heads are not a multiple of {nkv} KV heads"
            ));
        }
        let kv_donor = if i >= first_shared {
            let donor = (0..first_shared).rev().find(|&j| kinds[j] == kind);
            Some(donor.ok_or_else(|| {
                format!("layer {i} shares KV but no earlier layer has its attention type")
            })?)
        } else {
            None
        };
        let mlp_width = if double_wide && kv_shared > 0 && i >= first_shared {
            2 * intermediate
        } else {
            intermediate
        };
        layers.push(LayerSpec {
            kind,
            head_dim: hd,
            kv_heads: nkv,
            has_v_proj: !(k_eq_v && kind == AttnKind::Full),
            kv_donor,
            mlp_width,
        });
    }
    Ok(layers)
}

/// Per-layer embeddings (Gemma 4 E2B/E4B), when the config has them.
pub(super) fn ple_spec(
    f: &Fields,
    vocab_size: usize,
) -> std::result::Result<Option<PleSpec>, String> {
    Ok(match f.usize("hidden_size_per_layer_input")? {
        Some(width) if width > 0 => Some(PleSpec {
            width,
            vocab: f.usize("vocab_size_per_layer_input")?.unwrap_or(vocab_size),
        }),
        _ => None,
    })
}

/// The mixture-of-experts block (26B-A4B), when the config enables it.
pub(super) fn moe_spec(f: &Fields) -> std::result::Result<Option<MoeSpec>, String> {
    if !f.bool("enable_moe_block")?.unwrap_or(false) {
        return Ok(None);
    }
    let width = match f.usize("moe_intermediate_size")? {
        Some(w) => w,
        None => f.req_usize("expert_intermediate_size")?,
    };
    Ok(Some(MoeSpec {
        num_experts: f.req_usize("num_experts")?,
        top_k: f.req_usize("top_k_experts")?,
        width,
    }))
}

/// The attention type of every layer, from `layer_types` or Gemma 3's `sliding_window_pattern`.
pub(super) fn layer_kinds(
    f: &Fields,
    family: Family,
    n: usize,
) -> std::result::Result<Vec<AttnKind>, String> {
    let mut kinds = match f.map.get("layer_types") {
        Some(Value::Array(list)) => {
            if list.len() != n {
                return Err(format!(
                    "{}layer_types has {} entries, num_hidden_layers is {n}",
                    f.where_,
                    list.len()
                ));
            }
            list.iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some("sliding_attention") => Ok(AttnKind::Sliding),
                    Some("full_attention") => Ok(AttnKind::Full),
                    other => Err(format!(
                        "{}layer_types[{i}] = {other:?} is unknown",
                        f.where_
                    )),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?
        }
        Some(_) => return Err(format!("{}layer_types is not a list", f.where_)),
        None => {
            // The default of both families' HF configs: 5 sliding layers, then a full one.
            let pattern = f.usize("sliding_window_pattern")?.unwrap_or(6);
            (0..n)
                .map(|i| {
                    if pattern > 0 && (i + 1) % pattern == 0 {
                        AttnKind::Full
                    } else {
                        AttnKind::Sliding
                    }
                })
                .collect()
        }
    };
    // Gemma 4 always makes the last layer a full one; Gemma 3 never does.
    if family == Family::Gemma4
        && let Some(last) = kinds.last_mut()
    {
        *last = AttnKind::Full;
    }
    Ok(kinds)
}

/// RoPE of sliding and full layers, from `rope_parameters` (keyed by layer type) or, for Gemma 3,
/// the legacy keys `rope_theta`, `rope_local_base_freq` and `rope_scaling`.
pub(super) fn rope_specs(
    f: &Fields,
    family: Family,
) -> std::result::Result<(RopeSpec, RopeSpec), String> {
    let params = f.map.get("rope_parameters").and_then(Value::as_object);
    let by_type = |key: &str| params.and_then(|p| p.get(key)).and_then(Value::as_object);
    let spec =
        |m: &Map<String, Value>, what: &str, theta: f64| -> std::result::Result<RopeSpec, String> {
            let num = |k: &str| m.get(k).and_then(Value::as_f64);
            let kind = m
                .get("rope_type")
                .or(m.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("default");
            if !matches!(kind, "default" | "linear" | "proportional") {
                return Err(format!(
                    "{}{what}: rope_type `{kind}` is not supported (default, linear, proportional)",
                    f.where_
                ));
            }
            Ok(RopeSpec {
                theta: num("rope_theta").unwrap_or(theta),
                factor: if kind == "default" {
                    1.0
                } else {
                    num("factor").unwrap_or(1.0)
                },
                partial_rotary_factor: if kind == "proportional" {
                    num("partial_rotary_factor").unwrap_or(1.0)
                } else {
                    1.0
                },
            })
        };
    let plain = |theta: f64| RopeSpec {
        theta,
        factor: 1.0,
        partial_rotary_factor: 1.0,
    };
    match family {
        Family::Gemma4 => {
            let sliding = match by_type("sliding_attention") {
                Some(m) => spec(m, "rope_parameters.sliding_attention", 10_000.0)?,
                None => plain(10_000.0),
            };
            let full = match by_type("full_attention") {
                Some(m) => spec(m, "rope_parameters.full_attention", 1_000_000.0)?,
                None => RopeSpec {
                    partial_rotary_factor: 0.25,
                    ..plain(1_000_000.0)
                },
            };
            Ok((sliding, full))
        }
        Family::Gemma3 => {
            let local_theta = f.f64("rope_local_base_freq")?.unwrap_or(10_000.0);
            let global_theta = f.f64("rope_theta")?.unwrap_or(1_000_000.0);
            let sliding = match by_type("sliding_attention") {
                Some(m) => spec(m, "rope_parameters.sliding_attention", local_theta)?,
                None => plain(local_theta),
            };
            let full = match (by_type("full_attention"), f.map.get("rope_scaling")) {
                (Some(m), _) => spec(m, "rope_parameters.full_attention", global_theta)?,
                (None, Some(Value::Object(m))) => spec(m, "rope_scaling", global_theta)?,
                _ => plain(global_theta),
            };
            Ok((sliding, full))
        }
    }
}
