//! GGUF files made from the oracle fixtures by llama.cpp's own converter
//! (`tests/fixtures/make_gguf_fixtures.py`) give transformers' logits, like the safetensors they
//! came from: the GGUF names, metadata and per-layer arrays map onto the same model.

use std::path::Path;

use crate::common::{f32s, ids, max_abs_diff, run};
use gemma_model::model::Logits;
use safetensors::SafeTensors;

#[test]
fn converted_gemma4_ggufs_match_transformers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for name in ["gemma4_e2b_style", "gemma4_moe", "gemma4_31b_style_bf16"] {
        let bytes = std::fs::read(root.join("oracle").join(name).join("reference.safetensors"))
            .expect("reference");
        let st = SafeTensors::deserialize(&bytes).expect("parses");
        let want = f32s(&st, "logits");
        let prompt = ids(&st, "prompt_ids");
        let path = root.join("gguf").join(format!("{name}.gguf"));
        let lm = crate::common::load_exact(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = run(&lm, &prompt, &mut lm.model.new_cache(), Logits::All);
        let d = max_abs_diff(&got, &want);
        assert!(d < 2e-3, "{name}: GGUF logits differ by {d}");
    }
}
