//! Hostile model files, generated here: every one is refused with a message that says what is
//! wrong, never a panic, an abort or an allocation sized by the file's claims.

use std::path::Path;

use crate::common::gguf::{V, gguf};
use gemma_model::model::config::ModelConfig;
use gemma_model::model::gguf_config::model_config;
use gemma_model::weights::gguf::GgufFile;

fn open(dir: &Path, bytes: &[u8]) -> Result<GgufFile, String> {
    let path = dir.join("m.gguf");
    std::fs::write(&path, bytes).expect("write");
    GgufFile::open(&path).map_err(|e| e.to_string())
}

const EMBD: (&str, &[u64], u32, u64) = ("token_embd.weight", &[8, 4], 0, 0);

#[test]
fn malformed_tensor_infos_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let arch = ("general.architecture", V::Str("gemma3"));
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "no dimensions",
            gguf(&[], &[("t", &[], 0, 0)], 64),
            "has 0 dimensions",
        ),
        (
            "a zero dimension",
            gguf(&[], &[("t", &[0, 4], 0, 0)], 64),
            "dimension of 0",
        ),
        (
            "nine dimensions",
            gguf(&[], &[("t", &[1; 9], 0, 0)], 64),
            "has 9 dimensions",
        ),
        (
            // An offset that wraps the address space back into the header.
            "an offset near 2^64",
            gguf(&[arch], &[("t", &[8], 0, u64::MAX - 40)], 64),
            "past the end of the file",
        ),
        (
            // Each dimension within the file's length, their product past 2^64.
            "elements that overflow",
            gguf(&[], &[("t", &[1 << 16; 4], 0, 0)], 1 << 17),
            "larger than memory",
        ),
    ];
    for (what, bytes, says) in cases {
        let err = open(dir.path(), &bytes).expect_err(what);
        assert!(err.contains(says), "{what}: {err}");
    }
}

#[test]
fn deeply_nested_metadata_is_refused_without_recursing() {
    let dir = tempfile::tempdir().expect("tmp");
    // 200,000 arrays, each holding the next: a reader that recursed would overflow its stack.
    let mut raw = Vec::new();
    for _ in 0..200_000 {
        raw.extend(9u32.to_le_bytes()); // the element type: array
        raw.extend(1u64.to_le_bytes()); // one element
    }
    raw.extend(4u32.to_le_bytes());
    raw.extend(0u64.to_le_bytes());
    let bytes = gguf(&[("deep", V::Raw(9, raw))], &[EMBD], 128);
    let err = open(dir.path(), &bytes).expect_err("too deep");
    assert!(err.contains("nested deeper"), "{err}");
}

#[test]
fn absurd_counts_are_refused_before_allocating() {
    let dir = tempfile::tempdir().expect("tmp");
    let base = |block_count: V, heads: u32, align: u64| {
        gguf(
            &[
                ("general.architecture", V::Str("gemma3")),
                ("general.alignment", V::U64(align)),
                ("gemma3.block_count", block_count),
                ("gemma3.embedding_length", V::U32(64)),
                ("gemma3.attention.head_count", V::U32(heads)),
                ("gemma3.feed_forward_length", V::U32(128)),
                ("gemma3.context_length", V::U32(512)),
            ],
            &[EMBD],
            128,
        )
    };
    let config = |bytes: Vec<u8>| -> String {
        let file = open(dir.path(), &bytes).map_err(|e| format!("open: {e}"));
        match file {
            Ok(f) => model_config(&f).expect_err("refused").to_string(),
            Err(e) => e,
        }
    };
    // 2^40 layers: a terabyte of layer descriptions if it were believed.
    let err = config(base(V::U64(1 << 40), 4, 32));
    assert!(
        err.contains("num_hidden_layers") && err.contains("out of range"),
        "{err}"
    );
    let err = config(base(V::U64(100_000_000), 4, 32));
    assert!(err.contains("out of range"), "{err}");
    let err = config(base(V::U32(6), 0, 32));
    assert!(err.contains("head_count") && err.contains("is 0"), "{err}");
    let err = config(base(V::U32(6), 4, 1 << 62));
    assert!(err.contains("alignment"), "{err}");
}

#[test]
fn config_json_geometry_no_model_has_is_refused() {
    let base = serde_json::json!({
        "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 16, "sliding_window": 8, "vocab_size": 512,
    });
    assert!(ModelConfig::from_json(&base).is_ok());
    let cases = [
        (
            "num_hidden_layers",
            serde_json::json!(1e12),
            "num_hidden_layers",
        ),
        (
            "num_hidden_layers",
            serde_json::json!(1_000_000_000_000u64),
            "out of range",
        ),
        (
            "max_position_embeddings",
            serde_json::json!(0),
            "max_position_embeddings = 0",
        ),
        ("sliding_window", serde_json::json!(0), "sliding_window = 0"),
        (
            "bos_token_id",
            serde_json::json!(1_000_000_000_000u64),
            "bos_token_id",
        ),
        ("vocab_size", serde_json::json!(0), "vocab_size = 0"),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "linear", "factor": 0.0}),
            "RoPE",
        ),
    ];
    for (key, value, says) in cases {
        let mut c = base.clone();
        c[key] = value;
        let err = ModelConfig::from_json(&c).expect_err(key);
        assert!(err.contains(says), "{key}: {err}");
    }
}

/// A text over what is tokenized at once is refused before the tokenizer sees it (a 50 MB
/// message took 8 GB in `tokenizer.json`'s tokenizer), with the size and what to do; a
/// template source over its limit is refused uncompiled.
#[test]
fn oversized_text_and_templates_are_refused_unread() {
    use gemma_model::tokenizer::template::{ChatTemplate, MAX_SOURCE, TemplateSource};
    use gemma_model::tokenizer::{MAX_TEXT, Tokenizer};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tok = Tokenizer::from_file(&root.join("tests/fixtures/tiny_chat_gemma4/tokenizer.json"))
        .expect("tokenizer");
    let e = tok
        .encode(&"a".repeat(MAX_TEXT + 1))
        .expect_err("over the limit")
        .to_string();
    assert!(e.contains("4.0 MiB, over the 4 MiB"), "{e}");
    assert!(!tok.encode("small").expect("encodes").is_empty());
    let source = TemplateSource {
        text: format!("{{# {} #}}{{{{ messages }}}}", "x".repeat(MAX_SOURCE)),
        origin: "big.jinja".into(),
    };
    let e = ChatTemplate::new(&source, "<bos>", "<eos>")
        .expect_err("over the limit")
        .to_string();
    assert!(
        e.contains("big.jinja") && e.contains("was not compiled"),
        "{e}"
    );
}
