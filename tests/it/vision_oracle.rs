//! Images against transformers: for each tower kind in `tests/fixtures/vision` (the E2B/E4B ViT
//! with clipped linears and PLE, the 26B/31B ViT with `standardize` and bidirectional images
//! longer than the sliding window, the 12B's encoder-free embedder), the soft tokens of each
//! picture, the logits of every position of a prompt holding two pictures on every path, the
//! greedy ids, and the warm session: a follow-up reuses the pictures, another picture in the
//! same place does not. The fixtures come from `tests/fixtures/make_vision_oracle.py`, and two
//! 26B/31B layout variants (a sliding window longer than the prompt and one shorter than a
//! picture, `[sliding, sliding, full]` layers, a 2 x 2 x 24 tower with a 128-row position table,
//! the image ids swapped) from `make_vision_variants.py` with the newest transformers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{f32s, ids, max_abs_diff};

use gemma_engine::images::{MediaSpan, image_key};
use gemma_engine::protocol::Reuse;
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::checkpoint::LoadedModel;
use gemma_model::vision::{PatchInput, VisionTower};
use safetensors::SafeTensors;

const BUDGET: usize = 70;

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vision");
    let dirs: Vec<PathBuf> = [
        "e2b_style",
        "big_style",
        "unified_style",
        "big_window_long",
        "big_window_short",
    ]
    .iter()
    .map(|k| root.join(k))
    .collect();
    assert!(
        dirs.iter()
            .all(|d| d.join("reference.safetensors").exists())
    );
    dirs
}

struct Fixture {
    lm: LoadedModel,
    tower: VisionTower,
    logits: Vec<f32>,
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    images: Vec<MediaSpan>,
}

fn open(dir: &Path) -> Fixture {
    let lm = crate::common::load_exact(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let tower = gemma_model::vision::open(dir).expect("a tower");
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let prompt = ids(&st, "prompt_ids");
    let hidden = lm.model.config().hidden_size;
    let spec = tower.spec().clone();
    let mut images = Vec::new();
    let mut search = 0;
    for (i, name) in ["a.png", "b.png"].iter().enumerate() {
        let file = std::fs::read(dir.join(name)).expect("picture");
        let picture = gemma_media::Picture::decode(&file, name).expect("decodes");
        let side = spec.input_side() as u32;
        let p = gemma_media::patches_of(&picture.rgb, BUDGET, side).expect("budget");
        let positions = ids(&st, &format!("positions_{i}"));
        let theirs: Vec<[u32; 2]> = positions.chunks(2).map(|c| [c[0], c[1]]).collect();
        assert_eq!(p.positions, theirs, "{}: patch positions", dir.display());
        let rows = tower
            .encode(PatchInput {
                values: &p.values,
                positions: &p.positions,
            })
            .expect("encodes");
        let want = f32s(&st, &format!("features_{i}"));
        let d = max_abs_diff(&rows, &want);
        println!("{} {name}: max |Δsoft tokens| = {d:.2e}", dir.display());
        assert_eq!(rows.len(), want.len(), "{}: soft tokens", dir.display());
        assert!(
            d < 1e-3,
            "{} {name}: soft tokens differ by {d}",
            dir.display()
        );
        let at = search
            + prompt[search..]
                .iter()
                .position(|&t| t == spec.image_token_id)
                .expect("placeholders");
        search = at + rows.len() / hidden;
        images.push(MediaSpan {
            source: None,
            at,
            tokens: rows.len() / hidden,
            rows: Arc::new(rows),
            key: image_key(&file, BUDGET),
            budget: BUDGET,
            kind: gemma_engine::protocol::MediaKind::Image,
        });
    }
    Fixture {
        lm,
        tower,
        logits: f32s(&st, "logits"),
        prompt,
        greedy: ids(&st, "greedy_ids"),
        images,
    }
}

fn options(chunk: usize, all: bool) -> TurnOptions {
    TurnOptions {
        chunk,
        prompt_logits: all,
        ..TurnOptions::greedy(10, 1024)
    }
}

/// The logits of every prompt position, prefilled a chunk at a time, and the greedy answer.
fn run(f: &Fixture, session: &mut Session, chunk: usize) -> (Vec<f32>, Vec<u32>, Reuse) {
    let mut t = Turn::start_with(
        session,
        f.prompt.clone(),
        f.images.clone(),
        options(chunk, true),
    )
    .expect("starts");
    t.run(&f.lm.model, session, &mut |_| true).expect("runs");
    let reuse = t.stats().reuse;
    (
        t.take_prompt_logits().expect("logits"),
        t.answer().to_vec(),
        reuse,
    )
}

#[test]
fn image_prompts_match_transformers() {
    for dir in fixtures() {
        let mut f = open(&dir);
        let window = f.lm.model.config().sliding_window;
        // Every picture is longer than the sliding window, but in the variant whose window is
        // longer than the whole prompt.
        let longer = |i: &MediaSpan| i.rows.len() / f.lm.model.config().hidden_size > window;
        if dir.ends_with("big_window_long") {
            assert!(f.prompt.len() < window);
        } else {
            assert!(f.images.iter().all(longer));
        }
        // Chunks of 8 (each image still one step: the GEMM or the row kernels around it), one
        // chunk (the prefill GEMM), and burn's graph (the GPU path).
        for (path, chunk, fused) in [
            ("fused, chunks of 8", 8, true),
            ("fused, one chunk", 4096, true),
            ("burn", 4096, false),
        ] {
            f.lm.model.set_fused(fused);
            let mut session = Session::new(&f.lm.model);
            let (logits, answer, _) = run(&f, &mut session, chunk);
            let d = max_abs_diff(&logits, &f.logits);
            println!("{} ({path}): max |Δlogits| = {d:.2e}", dir.display());
            assert!(d < 2e-3, "{} ({path}): logits differ by {d}", dir.display());
            assert_eq!(answer, f.greedy, "{} ({path}): greedy ids", dir.display());
        }
        drop(f.tower);
    }
}

/// One turn answering `prompt` with `images`: its answer and what it cost.
fn answer_turn(
    f: &Fixture,
    session: &mut Session,
    prompt: &[u32],
    images: Vec<MediaSpan>,
) -> (Vec<u32>, gemma_engine::protocol::TurnStats) {
    let mut t =
        Turn::start_with(session, prompt.to_vec(), images, options(64, false)).expect("starts");
    t.run(&f.lm.model, session, &mut |_| true).expect("runs");
    (t.answer().to_vec(), t.stats())
}

#[test]
fn a_follow_up_reuses_the_pictures_and_another_picture_does_not() {
    let dir = &fixtures()[1];
    let f = open(dir);
    let mut session = Session::new(&f.lm.model);
    let (_, answer, reuse) = run(&f, &mut session, 64);
    assert_eq!(reuse, Reuse::New);
    // A follow-up: the whole conversation again plus a few ids, prefilled from where it was.
    let mut next = f.prompt.clone();
    next.extend(&answer);
    next.extend([7, 8, 9]);
    let held = session.position();
    let (warm, stats) = answer_turn(&f, &mut session, &next, f.images.clone());
    assert_eq!(stats.reuse, Reuse::ExactPrefix);
    assert_eq!(stats.reused_tokens, held);
    // Cold, for comparison.
    let (cold, _) = answer_turn(&f, &mut Session::new(&f.lm.model), &next, f.images.clone());
    assert_eq!(warm, cold);

    // Another picture in the second one's place (same size, another identity): nothing from
    // it on is reused.
    let mut other = f.images.clone();
    other[1].key = [0xAB; 32];
    let (_, stats) = answer_turn(&f, &mut session, &next, other.clone());
    assert_ne!(stats.reuse, Reuse::ExactPrefix);
    assert!(stats.reused_tokens <= other[1].at);
}

#[test]
fn generate_takes_ids_and_pictures() {
    let dir = &fixtures()[0];
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let prompt = ids(&st, "prompt_ids");
    let want = f32s(&st, "logits");
    let got = generate_logits(dir, dir, &prompt, &[]);
    let d = max_abs_diff(&got, &want);
    assert!(d < 2e-3, "generate --image: logits differ by {d}");
    let list: Vec<String> = prompt.iter().map(u32::to_string).collect();

    // The pictures in the other order: the runs' lengths no longer match, named.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .args(["generate", "--model"])
        .arg(dir)
        .args(["--ids", &list.join(","), "--image-tokens", "70"])
        .arg("--image")
        .arg(dir.join("b.png"))
        .arg("--image")
        .arg(dir.join("a.png"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is 60 long") && err.contains("66 soft tokens"),
        "{err}"
    );
}

/// `generate --ids … --image … --dump-logits` on `model`, with `extra` arguments: the logits.
fn generate_logits(model: &Path, pictures: &Path, prompt: &[u32], extra: &[&Path]) -> Vec<f32> {
    let list: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dump = tmp.path().join("logits.safetensors");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"));
    cmd.args(["generate", "--kv-dtype", "f32", "--model"])
        .arg(model);
    for e in extra {
        cmd.arg("--mmproj").arg(e);
    }
    let out = cmd
        .args(["--ids", &list.join(","), "--max-new-tokens", "1"])
        .args(["--image-tokens", "70", "--image"])
        .arg(pictures.join("a.png"))
        .arg("--image")
        .arg(pictures.join("b.png"))
        .arg("--dump-logits")
        .arg(&dump)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}: {}",
        model.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let got = std::fs::read(&dump).expect("dump");
    f32s(&SafeTensors::deserialize(&got).expect("parses"), "logits")
}

/// The fixtures converted to GGUF by `tests/fixtures/make_gguf_fixtures.py` (the tower kinds;
/// the layout variants of `make_vision_variants.py` are checked through safetensors).
fn gguf_fixtures() -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = fixtures()
        .into_iter()
        .filter(|d| d.join("gguf/model.gguf").exists())
        .collect();
    assert!(dirs.len() >= 3, "the GGUF conversions of the tower kinds");
    dirs
}

#[test]
fn an_mmproj_gguf_gives_the_safetensors_logits() {
    for dir in gguf_fixtures() {
        let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
        let st = SafeTensors::deserialize(&bytes).expect("reference parses");
        let (prompt, want) = (ids(&st, "prompt_ids"), f32s(&st, "logits"));
        let model = dir.join("gguf/model.gguf");
        // Found beside the model, then named.
        for extra in [vec![], vec![dir.join("gguf/mmproj-model.gguf")]] {
            let extra: Vec<&Path> = extra.iter().map(PathBuf::as_path).collect();
            let got = generate_logits(&model, &dir, &prompt, &extra);
            let d = max_abs_diff(&got, &want);
            println!("{} (GGUF + mmproj): max |Δlogits| = {d:.2e}", dir.display());
            assert_eq!(got.len(), want.len());
            assert!(
                d < 2e-3,
                "{}: GGUF + mmproj logits differ by {d}",
                dir.display()
            );
        }
    }
}

#[test]
fn the_mmproj_tower_is_the_safetensors_tower() {
    for dir in gguf_fixtures() {
        let f = open(&dir);
        let model = dir.join("gguf/model.gguf");
        let mut lm = crate::common::load_exact(&model)
            .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
        let tower =
            gemma_model::vision::open_for(&mut lm, None, None).expect("the mmproj beside it");
        // GGUF stores ε as an f32.
        let mut spec = tower.spec().clone();
        assert!((spec.eps - f.tower.spec().eps).abs() < 1e-12);
        spec.eps = f.tower.spec().eps;
        assert_eq!(&spec, f.tower.spec(), "{}", dir.display());
        assert_eq!(
            lm.model.config().image_blocks,
            f.lm.model.config().image_blocks,
            "{}: the image mask the mmproj implies",
            dir.display()
        );
        let file = std::fs::read(dir.join("a.png")).expect("picture");
        let picture = gemma_media::Picture::decode(&file, "a.png").expect("decodes");
        let side = tower.spec().input_side() as u32;
        let p = gemma_media::patches_of(&picture.rgb, BUDGET, side).expect("budget");
        let input = PatchInput {
            values: &p.values,
            positions: &p.positions,
        };
        let (ours, theirs) = (tower.encode(input), f.tower.encode(input));
        assert_eq!(ours.expect("encodes"), theirs.expect("encodes"));
    }
}

#[test]
fn a_gguf_without_its_mmproj_says_where_to_find_one() {
    let dir = &fixtures()[0];
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = tmp.path().join("model.gguf");
    std::fs::copy(dir.join("gguf/model.gguf"), &model).expect("copy");
    // The error `generate --ids … --image` gives on the GGUF in `tmp`.
    let refused = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
            .args(["generate", "--model"])
            .arg(&model)
            .args(["--ids", "2,500,501,502", "--image"])
            .arg(dir.join("a.png"))
            .output()
            .expect("runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused();
    assert!(
        err.contains("--mmproj") && err.contains("mmproj*.gguf"),
        "{err}"
    );
    // Two beside it: which one is not guessed.
    for name in ["mmproj-a.gguf", "mmproj-b.gguf"] {
        std::fs::copy(dir.join("gguf/mmproj-model.gguf"), tmp.path().join(name)).expect("copy");
    }
    let err = refused();
    assert!(err.contains("2 mmproj files"), "{err}");
}

/// A GGUF whose vocabulary does not name the image tokens (a converter's stand-in vocabulary):
/// `generate --ids` reads them off the prompt's layout, and the logits still match.
#[test]
fn image_ids_come_from_the_prompt_when_the_vocabulary_has_none() {
    let dir = &fixtures()[1];
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut gguf = std::fs::read(dir.join("gguf/model.gguf")).expect("gguf");
    let mut renamed = 0;
    for at in 0..gguf.len().saturating_sub(5) {
        if &gguf[at..at + 5] == b"image" {
            gguf[at..at + 5].copy_from_slice(b"imagf");
            renamed += 1;
        }
    }
    assert_eq!(renamed, 3, "the three image markers");
    let model = tmp.path().join("model.gguf");
    std::fs::write(&model, gguf).expect("write");
    std::fs::copy(
        dir.join("gguf/mmproj-model.gguf"),
        tmp.path().join("mmproj-model.gguf"),
    )
    .expect("copy");
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference");
    let st = SafeTensors::deserialize(&bytes).expect("reference parses");
    let got = generate_logits(&model, dir, &ids(&st, "prompt_ids"), &[]);
    let d = max_abs_diff(&got, &f32s(&st, "logits"));
    assert!(d < 2e-3, "logits differ by {d}");
}
