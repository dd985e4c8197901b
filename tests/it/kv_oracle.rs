//! The host KV cache in f16 and q8_0 against the same runs with the f32 cache: a two-turn
//! conversation (a prefill chunk long enough for the GEMM path, a short chunk, decode steps,
//! a second turn, more steps) on the tiny Gemma 4 fixture (heads 16 and 32 wide: its 16-wide
//! layers keep f16 under q8_0) and on the demo model (Gemma 3 270M, a Q4_K_M GGUF). The logits
//! of every position stay within a measured bound; f16's greedy ids are f32's.

use std::path::Path;

use burn::tensor::Device;
use gemma_model::checkpoint::{LoadedModel, load};
use gemma_model::demo;
use gemma_model::model::{ComputeDtype, KvDtype, Logits};

use crate::common::{max_abs_diff, run};

/// The conversation's pieces: each a chunk of new ids run at once.
fn pieces(vocab: usize) -> Vec<Vec<u32>> {
    let id = |i: usize| (3 + (i * 7919) % (vocab.min(20_000) - 3)) as u32;
    let mut at = 0;
    let mut take = |n: usize| {
        let p: Vec<u32> = (at..at + n).map(id).collect();
        at += n;
        p
    };
    let mut out = vec![take(40), take(9)];
    out.extend((0..5).map(|_| take(1)));
    out.push(take(30));
    out.extend((0..5).map(|_| take(1)));
    out
}

/// Every position's logits of the conversation with the cache in `t`, row after row.
fn logits(lm: &mut LoadedModel, t: KvDtype) -> Vec<f32> {
    lm.model.set_kv_dtype(t);
    let mut cache = lm.model.new_cache();
    assert_eq!(
        cache.host_dtype(),
        Some(t),
        "a host cache of the type asked for"
    );
    let vocab = lm.model.config().vocab_size;
    pieces(vocab)
        .iter()
        .flat_map(|p| run(lm, p, &mut cache, Logits::All))
        .collect()
}

fn argmax(rows: &[f32], vocab: usize) -> Vec<usize> {
    rows.chunks_exact(vocab)
        .map(|r| {
            (0..vocab)
                .max_by(|&a, &b| r[a].total_cmp(&r[b]))
                .unwrap_or(0)
        })
        .collect()
}

/// f16 and q8_0 against f32 on `lm`: the measured differences, held to `bounds`.
fn check(name: &str, lm: &mut LoadedModel, bounds: [f32; 2]) {
    let vocab = lm.model.config().vocab_size;
    let want = logits(lm, KvDtype::F32);
    for (t, bound) in [KvDtype::F16, KvDtype::Q8_0].into_iter().zip(bounds) {
        let got = logits(lm, t);
        let d = max_abs_diff(&got, &want);
        println!("{name} {t}: logits max |Δ| {d} (bound {bound})");
        assert!(d <= bound, "{name} {t}: logits differ by {d}");
        assert!(d > 0.0, "{name} {t}: the cache did change type");
        if t == KvDtype::F16 {
            assert_eq!(
                argmax(&got, vocab),
                argmax(&want, vocab),
                "{name}: greedy ids"
            );
        }
    }
}

/// The f16 cache is exactly a rounding of what is stored: transformers with every stored key
/// (after `k_norm` and RoPE) and value (after `v_norm`) rounded to f16, round to nearest even
/// (`tests/fixtures/make_kv_f16_reference.py`), gives our f16 logits up to the values that lie
/// within a last f32 bit of an f16 boundary, on six shapes (Gemma 3; Gemma 4 with KV sharing,
/// with k = v, with one head size everywhere). How far f16 lies from f32 (0.0006 to 0.02 on these,
/// 0.24 on a held-out one) is the model's gain on that rounding, measured in transformers itself
/// (`reference.json`), not an error of the cache.
#[test]
fn the_f16_cache_is_transformers_with_its_keys_and_values_rounded_to_f16() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let bytes = std::fs::read(root.join("kv_f16/reference.safetensors")).expect("reference");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("kv_f16/reference.json")).expect("json"),
    )
    .expect("json");
    let fixtures = meta["fixtures"].as_array().expect("fixtures");
    assert!(fixtures.len() >= 6);
    for rel in fixtures {
        let rel = rel.as_str().expect("a path");
        let dir = root.join(rel);
        let want = crate::common::f32s(&st, &format!("{}.logits", rel.replace('/', ".")));
        let r = std::fs::read(dir.join("reference.safetensors")).expect("reference");
        let r = safetensors::SafeTensors::deserialize(&r).expect("parses");
        let prompt = crate::common::ids(&r, "prompt_ids");
        let mut lm = load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
        lm.model.set_kv_dtype(KvDtype::F16);
        let f32_ref = crate::common::f32s(&r, "logits");
        for chunk in [prompt.len(), 5] {
            let got = crate::common::prompt_logits(&lm, &prompt, chunk);
            let (d, from_f32) = (max_abs_diff(&got, &want), max_abs_diff(&got, &f32_ref));
            println!(
                "{rel} (chunks of {chunk}): f16 cache vs transformers rounding to f16 {d:.2e}, \
                 vs its f32 {from_f32:.2e}"
            );
            // A value within a last f32 bit of an f16 boundary rounds either way, a step the
            // model's gain carries on: the bound is the f32 oracle's 2e-3, or twice what such
            // flips alone move transformers' own rounded run (measured by the generator).
            let flips = meta["rounding_flips_move_logits_by"][rel.replace('/', ".")]
                .as_f64()
                .expect("measured") as f32;
            assert!(
                d < 2e-3f32.max(2.0 * flips),
                "{rel}: the f16 cache is not that rounding: {d} (flips {flips}, from f32 \
                 {from_f32})"
            );
            assert!(d < from_f32, "{rel}: nearer the rounding than f32");
        }
    }
}

#[test]
fn f16_and_q8_0_caches_stay_near_f32_on_the_tiny_gemma4() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oracle/gemma4_e2b_style");
    let mut lm = load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
    // Measured max |Δlogits|: f16 0.0226, q8_0 0.234; bounds at about 2.5×.
    check("gemma4_e2b_style", &mut lm, [0.06, 0.6]);
}

#[test]
fn f16_and_q8_0_caches_stay_near_f32_on_the_quantized_demo_model() {
    let path = demo::ensure(&mut demo::print_progress()).expect("the demo model is needed");
    let mut lm = load(&path, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("load");
    // Measured max |Δlogits| over the 262k-token vocabulary: f16 0.062, q8_0 2.62 (q8_0's
    // error is half a step of each block's largest value); bounds at about 2.5×.
    check("gemma-3-270m Q4_K_M", &mut lm, [0.16, 6.5]);
}
