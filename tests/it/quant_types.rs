//! Every GGML type, through the whole model, against the exact reference: tiny Gemma 4 files in
//! three architectures (E2B-style, MoE with 3-D experts, 31B-style), converted to BF16 by
//! llama.cpp's converter and quantized here by llama.cpp's own `llama-quantize` to F32, F16,
//! BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL and IQ4_XS.
//! The reference is transformers (f32) on gguf-py's dequantization of each file
//! (`tests/fixtures/make_quant_fixtures.py`): our logits within 1e-3 of it at every prompt
//! position, and the same greedy ids.
//!
//! `llama-quantize` comes from `scripts/llama-cpp.sh` (built once from the llama-cpp-python
//! sdist and cached outside the repository), or from `GEMMA_CHAT_LLAMA_BIN`.

use crate::common::quant::{ids, quant_fixtures, root};
use crate::common::{f32s, max_abs_diff, run};
use gemma_model::model::Logits;
use safetensors::SafeTensors;

#[test]
fn every_type_matches_the_exact_reference() {
    let bytes = std::fs::read(root().join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("parses");
    let mut seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    for f in quant_fixtures() {
        let (arch, ty, prompt) = (&f.arch, &f.ty, &f.prompt);
        let lm = crate::common::load_exact(&f.path).unwrap_or_else(|e| panic!("{arch} {ty}: {e}"));
        // Every matrix is read in place, in the file's own types.
        let w = lm.model.weight_stats();
        for t in f.meta["tensor_types"].as_object().expect("types").keys() {
            seen.insert(t.clone());
            assert!(
                w.by_type.contains_key(t),
                "{arch} {ty}: no {t} weights in {:?}",
                w.by_type
            );
        }
        let want = f32s(&st, &format!("{arch}.{ty}"));
        let mut cache = lm.model.new_cache();
        let got = run(&lm, prompt, &mut cache, Logits::All);
        let d = max_abs_diff(&got, &want);
        assert!(d < 1e-3, "{arch} {ty}: logits differ by {d}");

        // Greedy continuation from the warm cache.
        let vocab = lm.model.config().vocab_size;
        let mut next = gemma_model::sampling::argmax(&got[got.len() - vocab..]) as u32;
        let mut greedy = vec![next];
        let want_ids = ids(&f.meta["greedy_ids"]);
        while greedy.len() < want_ids.len() {
            let l = run(&lm, &[next], &mut cache, Logits::Last);
            next = gemma_model::sampling::argmax(&l) as u32;
            greedy.push(next);
        }
        assert_eq!(greedy, want_ids, "{arch} {ty}: greedy ids");
        println!("{arch:6} {ty:7} max |Δlogits| {d:.1e}");
        checked += 1;
    }
    assert_eq!(checked, 45, "three architectures × fifteen types");
    let all = [
        "BF16", "F16", "F32", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0",
        "Q5_1", "Q5_K", "Q6_K", "Q8_0",
    ];
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), all);
}
