//! The config reader against what the newest transformers writes and reads back
//! (`tests/fixtures/config_forms`, from `make_config_forms.py`): each form of a Gemma 4 text
//! config's per-layer geometry (`per_layer_config: {}`, with entries, the older explicit keys)
//! loaded and run against transformers' logits, and the multimodal and assistant configs read to
//! the geometry transformers resolves.

use std::path::{Path, PathBuf};

use gemma_engine::protocol::TurnEnd;
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::audio::config::AudioSpec;
use gemma_model::model::config::ModelConfig;
use gemma_model::vision::config::{TowerSpec, VisionSpec};
use safetensors::SafeTensors;
use serde_json::Value;

use crate::common::{f32s, ids, load_exact, max_abs_diff, prompt_logits};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config_forms")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(root().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("json")
}

fn config_json(form: &str) -> Value {
    let text = std::fs::read_to_string(root().join(form).join("config.json")).expect("config");
    serde_json::from_str(&text).expect("json")
}

/// Each layer's `[head_dim, kv_heads]` as `expected.json` lists them.
fn geometry(v: &Value) -> Vec<(usize, usize)> {
    v.as_array()
        .expect("layers")
        .iter()
        .map(|l| {
            (
                l[0].as_u64().expect("n") as usize,
                l[1].as_u64().expect("n") as usize,
            )
        })
        .collect()
}

fn ours(c: &ModelConfig) -> Vec<(usize, usize)> {
    c.layers.iter().map(|l| (l.head_dim, l.kv_heads)).collect()
}

#[test]
fn every_text_form_loads_to_transformers_geometry_and_logits() {
    let exp = expected();
    for form in ["head_dim_kept", "per_layer_entries", "explicit_keys"] {
        let dir = root().join(form);
        let c =
            ModelConfig::from_json(&config_json(form)).unwrap_or_else(|e| panic!("{form}: {e}"));
        assert_eq!(ours(&c), geometry(&exp[form]["layers"]), "{form}");

        let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
        let st = SafeTensors::deserialize(&bytes).expect("reference parses");
        let (logits, prompt, greedy) = (
            f32s(&st, "logits"),
            ids(&st, "prompt_ids"),
            ids(&st, "greedy_ids"),
        );
        let lm = load_exact(&dir).unwrap_or_else(|e| panic!("{form}: {e}"));
        assert!(prompt.len() > lm.model.config().sliding_window);
        let d = max_abs_diff(&prompt_logits(&lm, &prompt, prompt.len()), &logits);
        println!("{form}: max |Δlogits| = {d:.2e}");
        assert!(d < 2e-3, "{form}: logits differ by {d}");

        let mut session = Session::new(&lm.model);
        let opts = TurnOptions::greedy(greedy.len(), usize::MAX);
        let mut turn = Turn::start(&mut session, prompt.clone(), opts).expect("start");
        let end = turn
            .run(&lm.model, &mut session, &mut |_| true)
            .expect("gen");
        assert_eq!(end, TurnEnd::Length);
        assert_eq!(turn.answer(), greedy.as_slice(), "{form}: greedy ids");
    }
}

#[test]
fn the_multimodal_config_reads_to_transformers_values() {
    let exp = &expected()["multimodal"];
    let root = config_json("multimodal");
    let c = ModelConfig::from_json(&root).expect("text");
    assert_eq!(ours(&c), geometry(&exp["layers"]));

    let v = VisionSpec::from_json(&root)
        .expect("vision")
        .expect("a tower");
    let TowerSpec::Vit(t) = &v.tower else {
        panic!("a ViT, found {:?}", v.tower)
    };
    let ev = &exp["vision"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}")) as usize;
    let flag = |v: &Value, k: &str| v[k].as_bool().unwrap_or_else(|| panic!("{k}"));
    assert_eq!(
        (t.hidden, t.layers, t.heads, t.kv_heads, t.head_dim),
        (
            n(ev, "hidden"),
            n(ev, "layers"),
            n(ev, "heads"),
            n(ev, "kv_heads"),
            n(ev, "head_dim")
        )
    );
    assert_eq!(
        (t.intermediate, t.positions, v.patch, v.pool),
        (
            n(ev, "intermediate"),
            n(ev, "positions"),
            n(ev, "patch"),
            n(ev, "pool")
        )
    );
    assert_eq!(
        (t.standardize, t.clipped),
        (flag(ev, "standardize"), flag(ev, "clipped"))
    );
    assert_eq!(
        (v.image_token_id, v.boi_token_id, v.eoi_token_id),
        (
            n(ev, "image_token_id") as u32,
            n(ev, "boi_token_id") as u32,
            n(ev, "eoi_token_id") as u32
        )
    );

    let a = AudioSpec::from_json(&root)
        .expect("audio")
        .expect("a tower");
    let ea = &exp["audio"];
    assert_eq!(
        (a.hidden, a.layers, a.heads, a.output_dims),
        (
            n(ea, "hidden"),
            n(ea, "layers"),
            n(ea, "heads"),
            n(ea, "output_dims")
        )
    );
    let channels: Vec<usize> = ea["conv_channels"]
        .as_array()
        .expect("channels")
        .iter()
        .map(|c| c.as_u64().expect("n") as usize)
        .collect();
    assert_eq!(a.conv_channels.to_vec(), channels);
    assert_eq!(
        (a.chunk, a.context_left, a.context_right, a.clipped),
        (
            n(ea, "chunk"),
            n(ea, "context_left"),
            n(ea, "context_right"),
            flag(ea, "clipped")
        )
    );
    assert_eq!(
        (a.audio_token_id, a.boa_token_id, a.eoa_token_id),
        (
            n(ea, "audio_token_id") as u32,
            n(ea, "boa_token_id") as u32,
            n(ea, "eoa_token_id") as u32
        )
    );
}

#[test]
fn the_assistant_config_is_named_as_a_drafter() {
    let root = config_json("assistant");
    let err = ModelConfig::from_json(&root).expect_err("not a chat model");
    assert!(
        err.contains("gemma4_assistant") && err.contains("transformers 5.25.0"),
        "{err}"
    );
    // Its text config alone is a Gemma 4 text config like any other (all its layers reading
    // the target's keys and values aside): the same per-layer rule gives transformers' sizes.
    let mut text = root["text_config"].clone();
    text["num_kv_shared_layers"] = 0.into();
    let c = ModelConfig::from_json(&text).expect("the text config");
    assert_eq!(ours(&c), geometry(&expected()["assistant"]["layers"]));
}
