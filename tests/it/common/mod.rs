//! Helpers shared by the integration tests that read the oracle fixtures.
// Each test crate uses a different subset.
#![allow(dead_code)]

pub mod chat;
pub mod gguf;
pub mod http;
pub mod llama;
pub mod mcp;
pub mod quant;
pub mod remote_tools;

use std::path::{Path, PathBuf};

use gemma_model::checkpoint::LoadedModel;
use gemma_model::model::{KvCache, Logits};
use safetensors::SafeTensors;

/// The oracle fixture directories (`tests/fixtures/oracle/*` with a `reference.safetensors`),
/// sorted; at least `min` of them.
pub fn oracle_fixtures(min: usize) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oracle");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("fixture dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("reference.safetensors").exists())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= min,
        "expected the oracle fixtures in {}",
        root.display()
    );
    dirs
}

/// An f32 tensor of a safetensors file, flat.
pub fn f32s(st: &SafeTensors, name: &str) -> Vec<f32> {
    st.tensor(name)
        .unwrap_or_else(|_| panic!("no tensor {name}"))
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// An i64 tensor of token ids of a safetensors file, flat.
pub fn ids(st: &SafeTensors, name: &str) -> Vec<u32> {
    st.tensor(name)
        .unwrap_or_else(|_| panic!("no tensor {name}"))
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")) as u32)
        .collect()
}

/// The largest element-wise difference of two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// `path` on the CPU in f32 with the KV cache in f32, as transformers keeps it: what the tests
/// that hold our paths to the reference and to each other load (a rounding cache turns the
/// paths' last-bit differences into whole steps of its type). The f16 and q8_0 caches are held
/// to this in `kv_oracle`.
pub fn load_exact(path: &Path) -> gemma_model::Result<LoadedModel> {
    let flex = burn::tensor::Device::flex();
    let f32 = gemma_model::model::ComputeDtype::F32;
    let mut lm = gemma_model::checkpoint::load(path, &flex, f32, &mut |_, _| {})?;
    lm.model.set_kv_dtype(gemma_model::model::KvDtype::F32);
    Ok(lm)
}

/// Runs `ids` on `cache` from its end and returns the logits asked for, f32, row after row.
pub fn run(lm: &LoadedModel, ids: &[u32], cache: &mut KvCache, logits: Logits) -> Vec<f32> {
    let pos = cache.len();
    lm.model
        .forward(ids, cache, pos, logits)
        .expect("forward")
        .expect("logits")
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32")
}

/// Logits of every prompt position (f32, row after row), prefilling in chunks of `chunk`.
pub fn prompt_logits(lm: &LoadedModel, prompt: &[u32], chunk: usize) -> Vec<f32> {
    let mut cache = lm.model.new_cache();
    let mut out = Vec::new();
    for part in prompt.chunks(chunk) {
        let pos = cache.len();
        let l = lm
            .model
            .forward(part, &mut cache, pos, Logits::All)
            .expect("forward")
            .expect("logits");
        out.extend(l.into_data().try_to_vec::<f32>().expect("f32"));
    }
    assert_eq!(cache.len(), prompt.len());
    out
}

/// What [`turn`] returns: how the turn ended, what it cost, and its answer.
pub type TurnResult = (
    gemma_engine::protocol::TurnEnd,
    gemma_engine::protocol::TurnStats,
    Vec<u32>,
);

/// Runs one turn answering `prompt` (the whole conversation) in `session`, the way every front
/// end runs one.
pub fn turn(
    lm: &LoadedModel,
    session: &mut gemma_engine::session::Session,
    prompt: &[u32],
    opts: gemma_engine::turn::TurnOptions,
) -> gemma_engine::error::Result<TurnResult> {
    let mut t = gemma_engine::turn::Turn::start(session, prompt.to_vec(), opts)?;
    let end = t.run(&lm.model, session, &mut |_| true)?;
    Ok((end, t.stats(), t.answer().to_vec()))
}
