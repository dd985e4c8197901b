//! Each decoder layer's attention geometry (head size, key/value heads) by transformers' own
//! rule for Gemma 4 text configs, which moved in 5.x:
//!
//! - `per_layer_config` present, even `{}` or `null`: it is the whole story. Layers it names take
//!   its `head_dim` / `num_key_value_heads`, every other layer the global `head_dim` /
//!   `num_key_value_heads`; `global_head_dim` and `num_global_key_value_heads` are ignored
//!   (transformers pops them unread). transformers 5.25 writes this form, and drops entries equal
//!   to the global values, so full layers that keep the sliding layers' head size come out as
//!   `"per_layer_config": {}` with no `global_head_dim`.
//! - absent (configs written before per-layer configs): full layers take `global_head_dim`
//!   (default 512) and, with `attention_k_eq_v`, `num_global_key_value_heads` when given.
//!
//! Gemma 3 has one head size for every layer and no such keys.

use serde_json::Value;

use super::json::Fields;
use super::{AttnKind, Family};

/// The attribute overrides of one `per_layer_config` entry that Gemma 4's layers read.
const KNOWN: [&str; 2] = ["head_dim", "num_key_value_heads"];

/// `(head_dim, kv_heads)` of every layer, in order.
pub(super) fn attention_geometry(
    f: &Fields,
    family: Family,
    kinds: &[AttnKind],
) -> Result<Vec<(usize, usize)>, String> {
    // HF's default for both families; every released config states it.
    let head_dim = f.usize("head_dim")?.unwrap_or(256);
    let kv_heads = f.req_usize("num_key_value_heads")?;
    let mut out = vec![(head_dim, kv_heads); kinds.len()];
    if family == Family::Gemma3 {
        return Ok(out);
    }
    match f.map.get("per_layer_config") {
        Some(entries) => apply_entries(f, entries, &mut out)?,
        None => {
            let global_head_dim = f.usize("global_head_dim")?.unwrap_or(512);
            let k_eq_v = f.bool("attention_k_eq_v")?.unwrap_or(false);
            let global_kv = f.usize("num_global_key_value_heads")?.filter(|_| k_eq_v);
            for (g, kind) in out.iter_mut().zip(kinds) {
                if *kind == AttnKind::Full {
                    *g = (global_head_dim, global_kv.unwrap_or(kv_heads));
                }
            }
        }
    }
    same_size_within_a_kind(kinds, &out)?;
    Ok(out)
}

/// Applies `per_layer_config`'s entries: layer index (decimal, maybe zero-padded) → overrides.
fn apply_entries(f: &Fields, entries: &Value, out: &mut [(usize, usize)]) -> Result<(), String> {
    let at = f.where_;
    let map = match entries {
        Value::Null => return Ok(()),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "{at}per_layer_config must be an object, found {other}"
            ));
        }
    };
    let n = out.len();
    for (key, value) in map {
        let i: usize = key
            .trim()
            .parse()
            .map_err(|_| format!("{at}per_layer_config key `{key}` is not a layer index"))?;
        if i >= n {
            return Err(format!(
                "{at}per_layer_config names layer {i}, the model has {n}"
            ));
        }
        let entry = value.as_object().ok_or_else(|| {
            format!("{at}per_layer_config.{key} must be an object, found {value}")
        })?;
        for (attr, v) in entry {
            let size = |what: &str| {
                v.as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or_else(|| {
                        format!(
                            "{at}per_layer_config.{key}.{attr} must be a positive {what}, found {v}"
                        )
                    })
            };
            match attr.as_str() {
                "head_dim" => out[i].0 = size("integer")?,
                "num_key_value_heads" => out[i].1 = size("integer")?,
                other => {
                    return Err(format!(
                        "{at}per_layer_config.{key}.{other}: a Gemma 4 layer reads only {} from its \
                         per-layer config (transformers refuses a per-layer `{other}` too)",
                        KNOWN.join(" and ")
                    ));
                }
            }
        }
    }
    Ok(())
}

/// transformers builds one RoPE table per layer type from that type's per-layer config and
/// refuses a type whose layers differ; so do we, naming the two layers.
fn same_size_within_a_kind(kinds: &[AttnKind], geo: &[(usize, usize)]) -> Result<(), String> {
    for kind in [AttnKind::Sliding, AttnKind::Full] {
        let mut of_kind = kinds
            .iter()
            .zip(geo)
            .enumerate()
            .filter(|(_, (k, _))| **k == kind);
        if let Some((first, (_, g0))) = of_kind.next()
            && let Some((i, (_, g))) = of_kind.find(|(_, (_, g))| g.0 != g0.0)
        {
            return Err(format!(
                "layers {first} and {i} are both {} attention layers with head sizes {} and {}: \
                 each layer type has one head size (transformers refuses this config too)",
                if kind == AttnKind::Full {
                    "full"
                } else {
                    "sliding"
                },
                g0.0,
                g.0
            ));
        }
    }
    Ok(())
}
