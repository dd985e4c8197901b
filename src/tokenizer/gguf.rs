//! A `tokenizers::Tokenizer` built from a GGUF file's SentencePiece vocabulary (`llama` or
//! `gemma4` tokenizer model): BPE with byte fallback, spaces as `▁`, no space prefix.
//!
//! It reproduces Google's `tokenizer.json`: the merges are derived from the pieces and scores the
//! way Hugging Face's SentencePiece converter derives them (every split of a piece into two pieces,
//! ordered by the merged piece's score, then by the lengths of its halves), control and
//! user-defined pieces match as whole added tokens, and decoding maps `▁` back to spaces.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::replace::Replace;
use tokenizers::{AddedToken, DecoderWrapper};

use super::Tokenizer;
use crate::error::{Error, Result};
use crate::loader::gguf::{GgufFile, Value};

/// SentencePiece piece types as GGUF stores them.
const CONTROL: u64 = 3;
const USER_DEFINED: u64 = 4;

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
    let list = |key: &str| {
        file.get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| bad(&format!("metadata `{key}` is missing")))
    };
    let tokens = list("tokenizer.ggml.tokens")?;
    let scores = list("tokenizer.ggml.scores")?;
    let types = list("tokenizer.ggml.token_type")?;
    if scores.len() != tokens.len() || types.len() != tokens.len() {
        return Err(bad("tokens, scores and token types differ in length"));
    }
    // llama.cpp's converter writes spaces where SentencePiece has `▁` in a few pieces.
    let pieces: Vec<String> = tokens
        .iter()
        .map(|t| t.as_str().unwrap_or_default().replace(' ', "▁"))
        .collect();
    let kinds: Vec<u64> = types.iter().map(|t| t.as_u64().unwrap_or(1)).collect();
    // The converter stores −1000 for control and user-defined pieces; SentencePiece gives them 0,
    // which puts their merges first.
    let score: Vec<f64> = scores
        .iter()
        .zip(&kinds)
        .map(|(s, &k)| {
            if k == CONTROL || k == USER_DEFINED {
                0.0
            } else {
                s.as_f64().unwrap_or(0.0)
            }
        })
        .collect();

    let vocab: Vocab = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), i as u32))
        .collect();
    // Converters that start from a BPE tokenizer.json store its merges ("left right", spaces as
    // in the pieces); SentencePiece-based ones do not, and the merges are derived.
    let merges = match file.get("tokenizer.ggml.merges").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .filter_map(|m| m.as_str())
            .filter_map(|m| m.split_once(' '))
            .map(|(l, r)| (l.replace(' ', "▁"), r.replace(' ', "▁")))
            .collect(),
        None => derive_merges(&pieces, &score, &vocab),
    };

    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .unk_token("<unk>".into())
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .map_err(|e| bad(&format!("cannot build the BPE model: {e}")))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    let replace = Replace::new(" ", "▁").map_err(|e| bad(&e.to_string()))?;
    tok.with_normalizer(Some(replace));
    let unspace = Replace::new("▁", " ").map_err(|e| bad(&e.to_string()))?;
    tok.with_decoder(Some(Sequence::new(vec![
        DecoderWrapper::Replace(unspace),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ])));
    let added: Vec<AddedToken> = pieces
        .iter()
        .zip(&kinds)
        .filter(|(_, k)| **k == CONTROL || **k == USER_DEFINED)
        .map(|(p, &k)| AddedToken::from(p.clone(), k == CONTROL).normalized(false))
        .collect();
    tok.add_tokens(&added);
    Ok(Tokenizer::from_inner(tok))
}

/// Every split of a piece into two pieces of the vocabulary, as a merge. Order: the merged
/// piece's score, then the left half's length, then the right half's (all descending); ties keep
/// vocabulary order.
fn derive_merges(pieces: &[String], score: &[f64], vocab: &Vocab) -> Vec<(String, String)> {
    struct Merge {
        left: u32,
        right: u32,
        score: f64,
        left_len: usize,
        right_len: usize,
    }
    let mut merges = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let start = merges.len();
        let mut left_len = 0;
        for (at, _) in piece.char_indices().skip(1) {
            left_len += 1;
            let (l, r) = piece.split_at(at);
            if let (Some(&left), Some(&right)) = (vocab.get(l), vocab.get(r)) {
                merges.push(Merge {
                    left,
                    right,
                    score: score[i],
                    left_len,
                    right_len: piece.chars().count() - left_len,
                });
            }
        }
        merges[start..].sort_by_key(|m| (m.left, m.right));
    }
    merges.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_len.cmp(&a.left_len))
            .then(b.right_len.cmp(&a.right_len))
    });
    merges
        .into_iter()
        .map(|m| {
            (
                pieces[m.left as usize].clone(),
                pieces[m.right as usize].clone(),
            )
        })
        .collect()
}
