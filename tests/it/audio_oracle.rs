//! Audio against transformers: for the E2B-style fixture in `tests/fixtures/audio` (an audio
//! tower with clipped linears and chunked attention over 5 and 3 chunks, a decoder with PLE and
//! KV sharing), each clip's soft tokens (the padding frame of the second stripped), the logits of
//! every position of a prompt holding both clips and the greedy ids, on every prefill path; the
//! mmproj GGUF's tower against the checkpoint's; a tower of another geometry (`alt_geometry`:
//! future context, a softcap that bites); and the errors a caller meets. The fixture comes
//! from `tests/fixtures/make_audio_oracle.py`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{f32s, ids, max_abs_diff};

use gemma_engine::images::{MediaSpan, image_key};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::audio::{AudioTower, open, open_for, soft_tokens};
use gemma_model::checkpoint::LoadedModel;
use safetensors::SafeTensors;

/// Measured 2.0e-5 (clip 0) and 2.5e-5 (clip 1) on rows up to ~4: about twice the larger.
const ROWS_BOUND: f32 = 5e-5;
/// Measured 4.0e-5 (fused, any chunking) and 4.2e-5 (burn) on logits up to ~1.6.
const LOGITS_BOUND: f32 = 1e-4;

fn dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audio/e2b_style");
    assert!(d.join("reference.safetensors").exists(), "{}", d.display());
    d
}

/// One clip's features and mask as the reference holds them.
struct Clip {
    features: Vec<f32>,
    mask: Vec<bool>,
    rows: Vec<f32>,
    wav: Vec<u8>,
}

struct Fixture {
    lm: LoadedModel,
    tower: AudioTower,
    clips: Vec<Clip>,
    logits: Vec<f32>,
    prompt: Vec<u32>,
    greedy: Vec<u32>,
}

fn open_fixture() -> Fixture {
    let dir = dir();
    let lm = crate::common::load_exact(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let tower = open(&dir).expect("a tower");
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let clips = ["a.wav", "b.wav"]
        .iter()
        .enumerate()
        .map(|(i, name)| Clip {
            features: f32s(&st, &format!("features_{i}")),
            mask: ids(&st, &format!("mask_{i}"))
                .iter()
                .map(|&m| m != 0)
                .collect(),
            rows: f32s(&st, &format!("audio_rows_{i}")),
            wav: std::fs::read(dir.join(name)).expect("clip"),
        })
        .collect();
    Fixture {
        lm,
        tower,
        clips,
        logits: f32s(&st, "logits"),
        prompt: ids(&st, "prompt_ids"),
        greedy: ids(&st, "greedy_ids"),
    }
}

/// The clips' rows from `tower`, placed at the prompt's `<|audio|>` runs.
fn placed(f: &Fixture, tower: &AudioTower) -> Vec<MediaSpan> {
    let id = tower.spec().audio_token_id;
    let hidden = f.lm.model.config().hidden_size;
    let mut search = 0;
    f.clips
        .iter()
        .map(|c| {
            let rows = tower.encode(&c.features, &c.mask).expect("encodes");
            let at = search
                + f.prompt[search..]
                    .iter()
                    .position(|&t| t == id)
                    .expect("placeholders");
            let n = rows.len() / hidden;
            assert_eq!(f.prompt[at - 1], tower.spec().boa_token_id);
            assert_eq!(
                f.prompt[at + n],
                tower.spec().eoa_token_id,
                "{n} rows fill the run"
            );
            search = at + n;
            MediaSpan {
                source: None,
                at,
                tokens: n,
                rows: Arc::new(rows),
                key: image_key(&c.wav, 0),
                budget: 0,
                kind: gemma_engine::protocol::MediaKind::Audio,
            }
        })
        .collect()
}

/// The logits of every prompt position, prefilled `chunk` ids at a time, and the greedy answer.
fn run(f: &Fixture, pieces: Vec<MediaSpan>, chunk: usize) -> (Vec<f32>, Vec<u32>) {
    let mut session = Session::new(&f.lm.model);
    let options = TurnOptions {
        chunk,
        prompt_logits: true,
        ..TurnOptions::greedy(f.greedy.len(), 1024)
    };
    let mut t = Turn::start_with(&mut session, f.prompt.clone(), pieces, options).expect("starts");
    t.run(&f.lm.model, &mut session, &mut |_| true)
        .expect("runs");
    (t.take_prompt_logits().expect("logits"), t.answer().to_vec())
}

#[test]
fn audio_rows_match_transformers() {
    let f = open_fixture();
    let hidden = f.lm.model.config().hidden_size;
    for (i, c) in f.clips.iter().enumerate() {
        let rows = f.tower.encode(&c.features, &c.mask).expect("encodes");
        assert_eq!(rows.len(), c.rows.len(), "clip {i}: soft tokens");
        assert_eq!(
            rows.len() / hidden,
            soft_tokens(&c.mask),
            "clip {i}: the processor's count"
        );
        let d = max_abs_diff(&rows, &c.rows);
        println!(
            "clip {i}: {} soft tokens, max |Δrows| = {d:.2e}",
            rows.len() / hidden
        );
        assert!(d < ROWS_BOUND, "clip {i}: rows differ by {d}");
    }
    // The second clip's last output frame is padding: stripped.
    let frames = |c: &Clip| c.mask.len().div_ceil(2).div_ceil(2);
    let second = &f.clips[1];
    assert_eq!(second.rows.len() / hidden, frames(second) - 1);
}

/// Clips of 1 to 12 attention chunks (full and partial last chunks; 0.15 s to 5.76 s), the
/// held-out 1.3 s and 0.7 s among them, against transformers 5.25
/// (`tests/fixtures/make_audio_lengths.py`); the reference's batched rows equal its rows alone,
/// so its padding mask is read the right way round.
#[test]
fn clips_of_every_length_match_transformers() {
    let f = open_fixture();
    let hidden = f.lm.model.config().hidden_size;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audio/lengths");
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
    )
    .expect("json");
    let counts = meta["soft_tokens"].as_array().expect("counts");
    let chunk = f.tower.spec().chunk;
    let mut chunks = Vec::new();
    for (i, n) in counts.iter().enumerate() {
        let mask: Vec<bool> = ids(&st, &format!("mask_{i}"))
            .iter()
            .map(|&m| m != 0)
            .collect();
        let rows = f
            .tower
            .encode(&f32s(&st, &format!("features_{i}")), &mask)
            .expect("encodes");
        let want = f32s(&st, &format!("rows_{i}"));
        assert_eq!(rows.len() / hidden, n.as_u64().expect("n") as usize);
        assert_eq!(rows.len(), want.len(), "clip {i}: soft tokens");
        let d = max_abs_diff(&rows, &want);
        println!("clip {i}: {n} soft tokens, max |Δrows| = {d:.2e}");
        // Rounding grows with the clip (measured up to 7e-5 at 12 chunks, rows up to ~4).
        assert!(d < 2e-4, "clip {i} ({n} soft tokens): rows differ by {d}");
        chunks.push((rows.len() / hidden).div_ceil(chunk));
    }
    // The held-out lengths from their files: decoded, turned into features and encoded here.
    for i in meta["batched"].as_array().expect("batched") {
        let i = i.as_u64().expect("i");
        let wav = std::fs::read(dir.join(format!("clip_{i}.wav"))).expect("wav");
        let clip = gemma_media::Clip::decode(&wav, "clip.wav").expect("decodes");
        let features = gemma_media::audio::features::features(clip.samples());
        let mask: Vec<bool> = ids(&st, &format!("mask_{i}"))
            .iter()
            .map(|&m| m != 0)
            .collect();
        assert_eq!(features.mask, mask, "clip {i}: feature mask");
        let d = max_abs_diff(&features.values, &f32s(&st, &format!("features_{i}")));
        assert!(d < 1e-3, "clip {i}: features differ by {d}");
        let rows = f
            .tower
            .encode(&features.values, &features.mask)
            .expect("encodes");
        let r = max_abs_diff(&rows, &f32s(&st, &format!("rows_{i}")));
        println!("clip {i} from its file: max |Δfeatures| = {d:.2e}, |Δrows| = {r:.2e}");
        assert!(r < 2e-4, "clip {i} from its file: rows differ by {r}");
    }
    assert_eq!(chunks.first(), Some(&1));
    assert_eq!(chunks.last(), Some(&12));
    for (j, i) in meta["batched"]
        .as_array()
        .expect("batched")
        .iter()
        .enumerate()
    {
        let alone = f32s(&st, &format!("rows_{}", i.as_u64().expect("i")));
        let batched = f32s(&st, &format!("batched_rows_{j}"));
        assert!(max_abs_diff(&alone, &batched) < 1e-5);
    }
}

/// A tower with other chunking (5 frames, 3 of past, 2 of future), a softcap of 3 that bites and
/// 4 heads, read from `audio_config` alone.
#[test]
fn another_geometry_matches_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audio/alt_geometry");
    let tower = open(&dir).expect("a tower");
    let s = tower.spec();
    assert_eq!(
        (s.chunk, s.context_left, s.context_right, s.heads),
        (5, 4, 2, 4)
    );
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let mask: Vec<bool> = ids(&st, "mask").iter().map(|&m| m != 0).collect();
    let rows = tower
        .encode(&f32s(&st, "features"), &mask)
        .expect("encodes");
    let want = f32s(&st, "rows");
    assert_eq!(rows.len(), want.len());
    let d = max_abs_diff(&rows, &want);
    println!("other geometry: max |Δrows| = {d:.2e}");
    // Measured 9.7e-6.
    assert!(d < 2e-5, "rows differ by {d}");
}

#[test]
fn audio_prompts_match_transformers() {
    let mut f = open_fixture();
    let pieces = placed(&f, &f.tower);
    // Chunks of 8 (each clip still in one step), one chunk, and burn's graph.
    for (path, chunk, fused) in [
        ("fused, chunks of 8", 8, true),
        ("fused, one chunk", 4096, true),
        ("burn", 4096, false),
    ] {
        f.lm.model.set_fused(fused);
        let (logits, answer) = run(&f, pieces.clone(), chunk);
        let d = max_abs_diff(&logits, &f.logits);
        println!("{path}: max |Δlogits| = {d:.2e}");
        assert!(d < LOGITS_BOUND, "{path}: logits differ by {d}");
        assert_eq!(answer, f.greedy, "{path}: greedy ids");
    }
}

#[test]
fn the_mmproj_tower_is_the_safetensors_tower() {
    let f = open_fixture();
    let mmproj = dir().join("gguf/mmproj-model.gguf");
    let tower = open_for(&f.lm, Some(&mmproj)).expect("the mmproj's audio tower");
    // The mmproj carries no audio ids: they come from the model.
    assert_eq!(tower.spec(), f.tower.spec());
    for c in &f.clips {
        let (ours, theirs) = (
            tower.encode(&c.features, &c.mask),
            f.tower.encode(&c.features, &c.mask),
        );
        let d = max_abs_diff(&ours.expect("encodes"), &theirs.expect("encodes"));
        println!("mmproj vs safetensors: max |Δrows| = {d:.2e}");
        assert!(d < 1e-6, "the mmproj's rows differ by {d}");
    }
    let (logits, answer) = run(&f, placed(&f, &tower), 4096);
    let d = max_abs_diff(&logits, &f.logits);
    assert!(d < LOGITS_BOUND, "mmproj: logits differ by {d}");
    assert_eq!(answer, f.greedy);
    // Without one, the checkpoint's own.
    let own = open_for(&f.lm, None).expect("the checkpoint's tower");
    assert_eq!(own.spec(), f.tower.spec());
}

#[test]
fn errors_name_what_is_wrong() {
    let f = open_fixture();
    let vision = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vision/e2b_style");
    let err = open(&vision).expect_err("no audio_config").to_string();
    assert!(
        err.contains("no audio tower") && err.contains("E2B/E4B"),
        "{err}"
    );
    let err = open(&dir().join("gguf/mmproj-model.gguf"))
        .expect_err("a GGUF")
        .to_string();
    assert!(err.contains("--mmproj"), "{err}");
    // A vision-only mmproj.
    let err = open_for(&f.lm, Some(&vision.join("gguf/mmproj-model.gguf")))
        .expect_err("no audio encoder")
        .to_string();
    assert!(err.contains("no audio encoder"), "{err}");

    let c = &f.clips[0];
    let err = f.tower.encode(&c.features[..c.features.len() - 1], &c.mask);
    let err = err.expect_err("a ragged frame").to_string();
    assert!(err.contains("frames of 128 mel bins"), "{err}");
    let err = f
        .tower
        .encode(&c.features[..c.features.len() - 128], &c.mask);
    let err = err.expect_err("one frame short").to_string();
    assert!(err.contains("a mask of 243 frames for 242 frames"), "{err}");
    assert!(f.tower.encode(&[], &[]).is_err());
}

/// The held-out checkpoint's layout (issue 57: 4 text layers with 2 KV-shared, PLE 16; the
/// clipped linears' bounds at transformers' defaults, ±inf; a tower 48 wide with 4 heads) and
/// its two clips, 1.3 s and 0.7 s, taken as the app takes them: decoded from their 16-bit WAV
/// files, turned into features and encoded here, then placed in the prompt. Every position's
/// logits against transformers' one batched forward (`make_audio_held_out.py`).
#[test]
fn the_held_out_layout_matches_transformers_from_the_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audio/held_out_style");
    let lm = crate::common::load_exact(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let tower = open(&dir).expect("a tower");
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let (prompt, greedy) = (ids(&st, "prompt_ids"), ids(&st, "greedy_ids"));
    let hidden = lm.model.config().hidden_size;
    let mut search = 0;
    let pieces: Vec<MediaSpan> = (0..2)
        .map(|i| {
            let wav = std::fs::read(dir.join(format!("clip_{i}.wav"))).expect("wav");
            let clip = gemma_media::Clip::decode(&wav, "clip.wav").expect("decodes");
            let f = gemma_media::audio::features::features(clip.samples());
            let rows = tower.encode(&f.values, &f.mask).expect("encodes");
            let id = tower.spec().audio_token_id;
            let at = search + prompt[search..].iter().position(|&t| t == id).expect("run");
            let n = rows.len() / hidden;
            assert_eq!(
                prompt[at + n],
                tower.spec().eoa_token_id,
                "clip {i}: {n} rows"
            );
            search = at + n;
            MediaSpan {
                source: None,
                at,
                tokens: n,
                rows: Arc::new(rows),
                key: image_key(&wav, 0),
                budget: 0,
                kind: gemma_engine::protocol::MediaKind::Audio,
            }
        })
        .collect();
    let mut session = Session::new(&lm.model);
    let options = TurnOptions {
        prompt_logits: true,
        ..TurnOptions::greedy(greedy.len(), 1024)
    };
    let mut t = Turn::start_with(&mut session, prompt, pieces, options).expect("starts");
    t.run(&lm.model, &mut session, &mut |_| true).expect("runs");
    let logits = t.take_prompt_logits().expect("logits");
    let d = max_abs_diff(&logits, &f32s(&st, "logits"));
    println!("held-out layout from the files: max |Δlogits| = {d:.2e}");
    assert!(d < 2e-3, "logits differ by {d}");
    assert_eq!(t.answer(), &greedy[..], "greedy ids");
}
