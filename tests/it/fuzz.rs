//! Bounded fuzzing on the stable toolchain: every parser of untrusted input gets valid seed
//! inputs mutated at random (bit flips, byte changes, insertions, deletions, truncations,
//! splices of interesting numbers), a fixed number of times from a fixed seed, so that a run is
//! reproducible. Each input must come back as a value or an error: a panic fails the test with
//! the target, the iteration and the input's hash; an abort (stack overflow, allocation
//! failure) fails the whole run. Set `GEMMA_CHAT_FUZZ_ITERS` for a longer run.
//!
//! Targets: the GGUF reader and its model config, a safetensors checkpoint's header (the whole
//! load, model built), `config.json`, the TOML config, chat files, chat templates (compiled and
//! rendered), KV snapshots (metadata and data, loaded into a session), a server's event stream
//! (framed and parsed as the remote engine does), and imports (ChatGPT's and ours, each chat then
//! loaded as a tab's tree).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use gemma_app::chats::SavedChat;
use gemma_app::config::Config;
use gemma_model::model::config::ModelConfig;
use gemma_model::model::gguf_config::model_config;
use gemma_model::tokenizer::template::{ChatTemplate, TemplateSource};
use gemma_model::weights::gguf::GgufFile;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn iterations() -> usize {
    std::env::var("GEMMA_CHAT_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// One random mutation of `seed`, biased to its first `hot` bytes (headers).
fn mutate(seed: &[u8], hot: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut b = seed.to_vec();
    let rounds = rng.random_range(1..=4);
    for _ in 0..rounds {
        let span = hot.min(b.len()).max(1);
        let at = rng.random_range(0..span);
        match rng.random_range(0..7) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] = rng.random();
            }
            2 => b.insert(at.min(b.len()), rng.random()),
            3 if !b.is_empty() => {
                b.remove(at.min(b.len() - 1));
            }
            4 => b.truncate(rng.random_range(0..=b.len())),
            5 => {
                // An interesting number, little-endian, over what is there.
                let n: u64 = *[
                    0u64,
                    1,
                    0xff,
                    0xffff,
                    0xffff_ffff,
                    u64::MAX,
                    1 << 40,
                    0x8000_0000,
                ]
                .get(rng.random_range(0..8))
                .unwrap_or(&0);
                for (i, byte) in n.to_le_bytes().iter().enumerate() {
                    if let Some(x) = b.get_mut(at + i) {
                        *x = *byte;
                    }
                }
            }
            _ => {
                // Repeat a slice (nesting, long runs).
                if !b.is_empty() {
                    let from = at.min(b.len() - 1);
                    let to = (from + rng.random_range(1..64)).min(b.len());
                    let piece = b[from..to].to_vec();
                    for _ in 0..rng.random_range(1..8) {
                        b.splice(from..from, piece.iter().copied());
                    }
                }
            }
        }
    }
    b
}

/// Runs `target` on `iterations()` mutations of each seed; panics are collected and reported.
fn fuzz(name: &str, seeds: &[Vec<u8>], hot: usize, target: impl Fn(&[u8])) -> usize {
    fuzz_n(name, seeds, hot, iterations(), target)
}

/// [`fuzz`] with `n` mutations per seed (for targets that load a whole model).
fn fuzz_n(name: &str, seeds: &[Vec<u8>], hot: usize, n: usize, target: impl Fn(&[u8])) -> usize {
    let mut rng = StdRng::seed_from_u64(0x0067_656d_6d61);
    let mut panics = Vec::new();
    let mut ran = 0;
    for seed in seeds {
        for i in 0..n {
            let input = mutate(seed, hot, &mut rng);
            ran += 1;
            if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
                let hash: u64 = input.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
                    (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
                });
                panics.push(format!("{name} iteration {i}: input hash {hash:x}"));
            }
        }
    }
    println!("{name}: {ran} inputs, {} panics", panics.len());
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));
    ran
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn gguf_headers_and_their_model_configs() {
    let seed = std::fs::read(root().join("tests/fixtures/gguf/gemma4_moe.gguf")).expect("fixture");
    // The header (metadata and tensor infos) is the first few kilobytes.
    let header = 16 << 10;
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("m.gguf");
    fuzz("gguf", &[seed], header, |bytes| {
        std::fs::write(&path, bytes).expect("write");
        if let Ok(file) = GgufFile::open(&path) {
            let _ = model_config(&file);
        }
    });
}

#[test]
fn config_json() {
    let seeds: Vec<Vec<u8>> = [
        "gemma3",
        "gemma4_e2b_style",
        "gemma4_moe",
        "gemma4_31b_style_bf16",
    ]
    .iter()
    .map(|f| {
        std::fs::read(
            root()
                .join("tests/fixtures/oracle")
                .join(f)
                .join("config.json"),
        )
        .expect("config")
    })
    .collect();
    fuzz("config.json", &seeds, usize::MAX, |bytes| {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
            let _ = ModelConfig::from_json(&v);
        }
    });
}

#[test]
fn toml_config() {
    let seed = std::fs::read(root().join("config/default.toml")).expect("default.toml");
    let path = Path::new("fuzz.toml");
    fuzz("toml config", &[seed], usize::MAX, |bytes| {
        if let Ok(text) = std::str::from_utf8(bytes) {
            let _ = Config::from_layers(Some((path, text)));
        }
    });
}

#[test]
fn chat_files() {
    let seed = br#"{"version":2,"order":0,"title":"t","model":"m","thinking":false,"messages":[
        {"role":"user","text":"Hi"},{"role":"model","text":"Hello","thought":"hm","footer":"done"},
        {"role":"user","text":"again"}]}"#
        .to_vec();
    let v1 = br#"{"version":1,"order":1,"title":"old","model":"m","thinking":true,"messages":[
        {"role":"user","text":"Hi"}],"ids":[2,5,6],"header":0,"last_answer":2}"#
        .to_vec();
    fuzz("chat files", &[seed, v1], usize::MAX, |bytes| {
        if let Ok(chat) = serde_json::from_slice::<SavedChat>(bytes) {
            let _ = serde_json::to_vec(&chat);
        }
    });
}

#[test]
fn chat_templates() {
    let seeds: Vec<Vec<u8>> = [
        "assets/templates/gemma4.jinja",
        "assets/templates/gemma3.jinja",
        "tests/fixtures/templates/official/gemma4-31b-it.jinja",
    ]
    .iter()
    .map(|p| std::fs::read(root().join(p)).expect("template"))
    .collect();
    let messages = serde_json::json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Why?"},
    ]);
    fuzz("chat templates", &seeds, usize::MAX, |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        let source = TemplateSource {
            text: text.to_string(),
            origin: "fuzz.jinja".into(),
        };
        if let Ok(t) = ChatTemplate::new(&source, "<bos>", "<eos>") {
            let _ = t.render(&messages, true, Some(false), None);
        }
    });
}

#[test]
fn server_event_streams() {
    use gemma_engine::remote::{sse::Framer, wire};
    let seed = b": ping\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\",\
        \"reasoning_content\":\"hm\"},\"finish_reason\":null}]}\n\ndata: {\"choices\":[],\
        \"usage\":{\"prompt_tokens\":30,\"completion_tokens\":4,\"prompt_tokens_details\":\
        {\"cached_tokens\":20}},\"timings\":{\"cache_n\":20,\"prompt_per_second\":100.5}}\r\n\r\n\
        data: {\"prompt_progress\":{\"total\":10,\"cache\":2,\"processed\":5}}\r\r\
        data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
        data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n"
        .to_vec();
    fuzz("server event streams", &[seed], usize::MAX, |bytes| {
        // In pieces, as a network delivers them, with a small line limit to reach it.
        let mut f = Framer::new(256);
        for chunk in bytes.chunks(7) {
            let (events, error) = f.push(chunk);
            for e in events {
                let _ = wire::parse(&e);
            }
            if error.is_some() {
                return;
            }
        }
        if let Ok(Some(e)) = f.finish() {
            let _ = wire::parse(&e);
        }
    });
}

#[test]
fn imports() {
    use gemma_app::app::chat_tree::tree;
    use gemma_app::chats::export::import;
    let ours = br#"{"version":3,"order":0,"title":"t","model":"m","thinking":false,"messages":[
        {"id":1,"role":"user","text":"a"},{"id":2,"parent":1,"role":"model","text":"A"}],
        "branches":[{"parent":1,"messages":[{"id":3,"parent":1,"role":"model","text":"B"},
        {"id":4,"parent":3,"role":"user","text":"c"}]}]}"#
        .to_vec();
    let chatgpt = br#"[{"title":"Hi","current_node":"r","mapping":{
        "z":{"parent":null,"message":{"author":{"role":"user"},"create_time":1.0,"content":{"parts":["Hi"]}}},
        "c":{"parent":"z","message":{"author":{"role":"assistant"},"create_time":2.0,"content":{"parts":["first"]}}},
        "t":{"parent":"z","message":{"author":{"role":"tool"},"content":{"parts":["{}"]}}},
        "b":{"parent":"t","message":{"author":{"role":"assistant"},"create_time":3.0,"content":{"parts":["second"]}}},
        "q":{"parent":"c","message":{"author":{"role":"user"},"create_time":5.0,"content":{"parts":["more"]}}},
        "r":{"parent":"q","message":{"author":{"role":"assistant"},"create_time":6.0,"content":{"parts":["sure"]}}}}}]"#
        .to_vec();
    fuzz("imports", &[ours, chatgpt], usize::MAX, |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        if let Ok(got) = import(text) {
            for c in got.chats {
                let _ = tree(c.messages, c.branches);
            }
        }
    });
}

#[test]
fn safetensors_checkpoints() {
    let from = root().join("tests/fixtures/oracle/gemma3");
    let seed = std::fs::read(from.join("model.safetensors")).expect("weights");
    // The 8-byte length and the JSON header.
    let header = 8 + u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")) as usize;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::copy(from.join("config.json"), dir.path().join("config.json")).expect("config");
    let path = dir.path().join("model.safetensors");
    let n = (iterations() / 10).max(50);
    fuzz_n("safetensors", &[seed], header, n, |bytes| {
        std::fs::write(&path, bytes).expect("write");
        let _ = gemma_model::checkpoint::load(
            dir.path(),
            &burn::tensor::Device::flex(),
            gemma_model::model::ComputeDtype::F32,
            &mut |_, _| {},
        );
    });
}

#[test]
fn kv_snapshots() {
    use gemma_engine::kv_store::KvStore;
    use gemma_engine::session::Session;
    let from = root().join("tests/fixtures/oracle/gemma4_e2b_style");
    let lm = gemma_model::checkpoint::load(
        &from,
        &burn::tensor::Device::flex(),
        gemma_model::model::ComputeDtype::F32,
        &mut |_, _| {},
    )
    .expect("load");
    let m = &lm.model;
    let dir = tempfile::tempdir().expect("tmp");
    let store = KvStore::new(dir.path().to_path_buf(), &from, m, 1 << 30);
    let convo: Vec<u32> = (0..12).map(|i| 3 + i * 11).collect();
    let mut s = Session::new(m);
    s.prefill(m, &convo, 4).expect("prefill");
    store.save(&convo, &s, 0).expect("save");
    let file = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "kv"))
        .expect("a snapshot");
    let seed = std::fs::read(&file).expect("read");
    let header = 8 + u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")) as usize;
    fuzz("kv snapshots", &[seed], header + 64, |bytes| {
        std::fs::write(&file, bytes).expect("write");
        let mut session = Session::new(m);
        if store.load(&convo, m, &mut session) {
            // What loads is consistent.
            assert_eq!(session.position(), session.resident().len());
        }
    });
}
