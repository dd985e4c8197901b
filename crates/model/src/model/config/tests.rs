//! `config.json` reading against hand-written configs: layouts, defaults, per-layer overrides, refusals.

use super::*;
use serde_json::{Value, json};

fn gemma4_text() -> Value {
    json!({
        "model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "global_head_dim": 32, "sliding_window": 8, "vocab_size": 512,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "sliding_attention"],
    })
}

#[test]
fn wrapper_and_text_only_layouts_agree() {
    let text = ModelConfig::from_json(&gemma4_text()).expect("text-only");
    let wrapped = json!({"model_type": "gemma4", "text_config": gemma4_text()});
    assert_eq!(ModelConfig::from_json(&wrapped).expect("wrapper"), text);
}

#[test]
fn a_missing_required_field_is_named() {
    let mut v = gemma4_text();
    v.as_object_mut().expect("object").remove("hidden_size");
    let wrapped = json!({"model_type": "gemma4", "text_config": v});
    let err = ModelConfig::from_json(&wrapped).expect_err("must fail");
    assert!(err.contains("text_config.hidden_size"), "{err}");
    let mut v = gemma4_text();
    v["sliding_window"] = json!("eight");
    let err = ModelConfig::from_json(&v).expect_err("must fail");
    assert!(
        err.contains("sliding_window") && err.contains("integer"),
        "{err}"
    );
}

#[test]
fn gemma4_forces_the_last_layer_full_and_gemma3_does_not() {
    let c = ModelConfig::from_json(&gemma4_text()).expect("parses");
    assert_eq!(c.layers[5].kind, AttnKind::Full);
    assert_eq!(c.layers[5].head_dim, 32);
    assert_eq!(c.layers[4].head_dim, 16);
    let mut v = gemma4_text();
    v["model_type"] = json!("gemma3_text");
    let c = ModelConfig::from_json(&v).expect("parses");
    assert_eq!(c.layers[5].kind, AttnKind::Sliding);
    assert_eq!(c.layers[2].head_dim, 16, "Gemma 3 has one head dim");
    assert_eq!(c.norm_offset, 1.0);
    assert!((c.attn_scale - 256f32.powf(-0.5)).abs() < 1e-9);
}

fn heads(c: &ModelConfig) -> Vec<(usize, usize)> {
    c.layers.iter().map(|l| (l.head_dim, l.kv_heads)).collect()
}

#[test]
fn without_per_layer_config_the_global_keys_and_their_defaults_apply() {
    let mut v = gemma4_text();
    v["attention_k_eq_v"] = json!(true);
    v["num_global_key_value_heads"] = json!(1);
    let c = ModelConfig::from_json(&v).expect("parses");
    assert_eq!((c.layers[2].head_dim, c.layers[2].kv_heads), (32, 1));
    assert_eq!((c.layers[5].head_dim, c.layers[5].kv_heads), (32, 1));
    assert!(!c.layers[2].has_v_proj && c.layers[1].has_v_proj);
    // Without k = v the global KV heads are not read; without global_head_dim, 512.
    v["attention_k_eq_v"] = json!(false);
    v.as_object_mut().expect("object").remove("global_head_dim");
    let c = ModelConfig::from_json(&v).expect("parses");
    assert_eq!((c.layers[2].head_dim, c.layers[2].kv_heads), (512, 2));
    assert_eq!((c.layers[1].head_dim, c.layers[1].kv_heads), (16, 2));
}

#[test]
fn per_layer_config_present_even_empty_means_no_implicit_global_head_dim() {
    // transformers 5.25 writes this for full layers that keep the sliding layers' head size;
    // `global_head_dim` beside it is popped unread, as transformers does.
    for empty in [json!({}), Value::Null] {
        let mut v = gemma4_text();
        v["per_layer_config"] = empty;
        let c = ModelConfig::from_json(&v).expect("parses");
        assert_eq!(heads(&c), vec![(16, 2); 6]);
    }
}

#[test]
fn per_layer_config_entries_set_their_layers() {
    let mut v = gemma4_text();
    v["attention_k_eq_v"] = json!(true);
    v["num_global_key_value_heads"] = json!(2);
    v["per_layer_config"] = json!({
        "02": {"head_dim": 24, "num_key_value_heads": 1},
        "5": {"head_dim": 24, "num_key_value_heads": 4},
    });
    let c = ModelConfig::from_json(&v).expect("parses");
    assert_eq!(
        heads(&c),
        vec![(16, 2), (16, 2), (24, 1), (16, 2), (16, 2), (24, 4)]
    );
}

#[test]
fn per_layer_config_it_cannot_follow_is_refused_by_name() {
    let refused = |entries: Value, says: &[&str]| {
        let mut v = gemma4_text();
        v["per_layer_config"] = entries;
        v["transformers_version"] = json!("5.25.0");
        let err = ModelConfig::from_json(&v).expect_err("must fail");
        for s in says.iter().chain(&["written by transformers 5.25.0"]) {
            assert!(err.contains(s), "{err} (expected `{s}`)");
        }
    };
    refused(json!({"9": {"head_dim": 24}}), &["layer 9", "has 6"]);
    refused(
        json!({"x": {"head_dim": 24}}),
        &["`x`", "not a layer index"],
    );
    refused(json!([1]), &["per_layer_config must be an object"]);
    refused(
        json!({"2": {"intermediate_size": 8}}),
        &[
            "per_layer_config.2.intermediate_size",
            "head_dim and num_key_value_heads",
        ],
    );
    refused(
        json!({"2": {"head_dim": "24"}}),
        &["per_layer_config.2.head_dim", "positive"],
    );
    refused(
        json!({"2": {"head_dim": 0}}),
        &["per_layer_config.2.head_dim"],
    );
    refused(
        json!({"2": {"head_dim": 24}}),
        &["layers 2 and 5", "full", "24 and 16"],
    );
}

#[test]
fn an_assistant_checkpoint_is_refused_as_a_chat_model() {
    let v = json!({"model_type": "gemma4_assistant", "text_config": gemma4_text()});
    let err = ModelConfig::from_json(&v).expect_err("a drafter");
    assert!(
        err.contains("gemma4_assistant") && err.contains("drafter"),
        "{err}"
    );
}

#[test]
fn kv_sharing_picks_the_last_donor_of_the_same_type() {
    let mut v = gemma4_text();
    v["num_kv_shared_layers"] = json!(3);
    v["use_double_wide_mlp"] = json!(true);
    let c = ModelConfig::from_json(&v).expect("parses");
    let donors: Vec<_> = c.layers.iter().map(|l| l.kv_donor).collect();
    assert_eq!(donors, [None, None, None, Some(1), Some(1), Some(2)]);
    assert_eq!(c.layers[2].mlp_width, 96);
    assert_eq!(c.layers[3].mlp_width, 192);
}

#[test]
fn proportional_rope_rotates_a_quarter_over_the_whole_head() {
    let c = ModelConfig::from_json(&gemma4_text()).expect("parses");
    let f = c.rope_full.inv_freq(512);
    assert_eq!(f.len(), 256);
    assert!(f[64..].iter().all(|&x| x == 0.0));
    let expect = 1.0 / 1e6f64.powf(2.0 * 63.0 / 512.0);
    assert!((f[63] as f64 - expect).abs() < 1e-9);
    assert_eq!(
        c.rope_sliding.inv_freq(16)[7],
        (1.0 / 1e4f32.powf(14.0 / 16.0))
    );
}

#[test]
fn gemma3_legacy_rope_keys() {
    let v = json!({
        "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 16, "sliding_window": 8, "vocab_size": 512, "query_pre_attn_scalar": 24,
        "sliding_window_pattern": 6, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    });
    let c = ModelConfig::from_json(&v).expect("parses");
    assert_eq!(c.rope_full.factor, 8.0);
    assert_eq!(c.rope_sliding.theta, 1e4);
    let kinds: Vec<_> = c.layers.iter().map(|l| l.kind == AttnKind::Full).collect();
    assert_eq!(kinds, [false, false, false, false, false, true, false]);
}

#[test]
fn unsupported_models_are_refused() {
    let mut v = gemma4_text();
    v["model_type"] = json!("llama");
    assert!(
        ModelConfig::from_json(&v)
            .expect_err("refused")
            .contains("llama")
    );
    let mut v = gemma4_text();
    v["attention_bias"] = json!(true);
    assert!(
        ModelConfig::from_json(&v)
            .expect_err("refused")
            .contains("attention_bias")
    );
}

#[test]
fn image_attention_follows_use_bidirectional_attention() {
    let with = |v: Value, model_type: &str| {
        let mut c = gemma4_text();
        c["use_bidirectional_attention"] = v;
        c["model_type"] = json!(model_type);
        ModelConfig::from_json(&c).map(|c| c.image_blocks)
    };
    assert_eq!(with(Value::Null, "gemma4_text"), Ok(ImageBlocks::Causal));
    assert_eq!(with(json!(false), "gemma3_text"), Ok(ImageBlocks::Causal));
    assert_eq!(
        with(json!("vision"), "gemma4_text"),
        Ok(ImageBlocks::Sliding)
    );
    assert_eq!(
        with(json!("vision"), "gemma4_unified_text"),
        Ok(ImageBlocks::Every)
    );
    for refused in [json!(true), json!("all")] {
        let err = with(refused, "gemma4_text").expect_err("an embedding model");
        assert!(err.contains("use_bidirectional_attention"), "{err}");
    }
}

#[test]
fn a_tower_whose_layers_have_their_own_geometry_is_refused_by_name() {
    let layered = json!({"0": {"head_dim": 8}});
    let root = |tower: &str| {
        json!({
            "model_type": "gemma4", "text_config": gemma4_text(), "transformers_version": "5.25.0",
            tower: {"per_layer_config": layered.clone()},
        })
    };
    let err = crate::vision::config::VisionSpec::from_json(&root("vision_config"))
        .expect_err("per-layer vision geometry");
    assert!(
        err.contains("vision_config.per_layer_config") && err.contains("transformers 5.25.0"),
        "{err}"
    );
    let err = crate::audio::config::AudioSpec::from_json(&root("audio_config"))
        .expect_err("per-layer audio geometry");
    assert!(err.contains("audio_config.per_layer_config"), "{err}");
    // An empty one changes nothing.
    let mut ok = root("vision_config");
    ok["vision_config"]["per_layer_config"] = json!({});
    assert!(crate::vision::config::VisionSpec::from_json(&ok).is_ok());
}
