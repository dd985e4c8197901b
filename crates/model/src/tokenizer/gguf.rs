//! The tokenizer stored in a GGUF file's metadata (`llama` or `gemma4` tokenizer model): BPE with
//! byte fallback, spaces as `▁`, no space prefix, control and user-defined pieces matched whole.
//!
//! It reproduces Google's `tokenizer.json` with the compact [`Spm`]: a SentencePiece vocabulary
//! (scores, no merges) ranks merges as Hugging Face's SentencePiece converter derives them
//! (every split of a piece into two pieces, ordered by the merged piece's score, then by the
//! lengths of its halves); a vocabulary that lists its merges ranks them by the list.

use super::Tokenizer;
use super::spm::Spm;
use crate::error::{Error, Result};
use crate::weights::gguf::{GgufFile, Value};

/// SentencePiece piece types as GGUF stores them.
const CONTROL: u64 = super::spm::CONTROL as u64;
const USER_DEFINED: u64 = super::spm::USER_DEFINED as u64;

/// Builds the tokenizer stored in a GGUF file's metadata.
pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
    let bad = |msg: &str| Error::Tokenizer(format!("{}: {msg}", file.path().display()));
    let model = file
        .get("tokenizer.ggml.model")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !matches!(model, "llama" | "gemma4") {
        return Err(bad(&format!(
            "tokenizer model `{model}` is not a SentencePiece vocabulary gemma-chat can build"
        )));
    }
    let missing = |key: &str| bad(&format!("metadata `{key}` is missing or mistyped"));
    let numbers = |key: &str| {
        file.get(key)
            .and_then(Value::numbers)
            .ok_or_else(|| missing(key))
    };
    let tokens = file
        .get("tokenizer.ggml.tokens")
        .and_then(Value::strings)
        .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
    let scores = numbers("tokenizer.ggml.scores")?;
    let types = numbers("tokenizer.ggml.token_type")?;
    if scores.len() != tokens.len() || types.len() != tokens.len() {
        return Err(bad("tokens, scores and token types differ in length"));
    }
    let kinds: Vec<u64> = types.iter().map(|&t| t as u64).collect();
    // The converter stores −1000 for control and user-defined pieces; SentencePiece gives them 0,
    // which puts their merges first.
    let score: Vec<f64> = scores
        .iter()
        .zip(&kinds)
        .map(|(s, &k)| {
            if k == CONTROL || k == USER_DEFINED {
                0.0
            } else {
                *s
            }
        })
        .collect();

    let score = score.iter().map(|&s| s as f32).collect();
    let kinds = kinds.iter().map(|&k| k.min(255) as u8).collect();
    let spm = Spm::new(&tokens, score, kinds)?;
    // Converters that start from a BPE tokenizer.json (Gemma 4's) store its merges ("left right",
    // spaces as in the pieces); SentencePiece-based ones do not, and the scores rank them.
    let spm = match file.get("tokenizer.ggml.merges").and_then(Value::strings) {
        None => spm,
        Some(listed) => spm.with_merges(
            listed
                .iter()
                .filter_map(|m| m.split_once(' '))
                .map(|(l, r)| (l.replace(' ', "▁"), r.replace(' ', "▁"))),
        ),
    };
    Ok(Tokenizer::from_spm(spm))
}
