//! Recordings in a chat turn, through the engine protocol: the turn a `Submit` with an audio
//! attachment builds is the checkpoint's own layout with the template's `<|audio|>` expanded as
//! transformers' processor expands it (`<|audio>`, the piece's placeholders, `<audio|>`),
//! answered as the `--ids` path answers it; a follow-up reuses the recording without encoding
//! it again; a restart brings it back from the kept copy; the headless front doors
//! (`--prompt --audio`, `generate --chat --audio`, `generate --ids --audio`) send it, and a run
//! of the wrong length is refused. On a copy of the E2B-style audio+text fixture with the tiny
//! Gemma 4 tokenizer (its audio markers at the fixture's ids).

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use burn::tensor::Device;
use gemma_engine::images::{MediaSpan, image_key};
use gemma_engine::protocol::{Attachment, Command, Event, Exchange, MediaKind, Reuse, TabSettings};
use gemma_engine::reply::{Piece, Reply};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_engine::{EngineHandle, EngineOptions, spawn};
use gemma_model::checkpoint::load;
use gemma_model::model::ComputeDtype;

use crate::common::chat::{
    configure, engine, first_after_loading, fixture_at, open, root, short_answers, submit,
};

pub(crate) fn audio_fixture() -> tempfile::TempDir {
    fixture_at(&root().join("tests/fixtures/audio/e2b_style"), None)
}

pub(crate) fn clip(name: &str) -> PathBuf {
    root().join("tests/fixtures/audio/e2b_style").join(name)
}

/// The answer of the `--ids` path (a fresh session) to the built-in layout of `text` after the
/// `clips`: the prompt's length and the answer's text.
fn by_hand(dir: &Path, clips: &[&Path], text: &str) -> (usize, String) {
    let lm = load(dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("loads");
    let tower = gemma_model::audio::open_for(&lm, None).expect("a tower");
    let s = tower.spec().clone();
    let tok = lm.tokenizer.as_ref().expect("tokenizer");
    let mut prompt = vec![2];
    prompt.extend(tok.encode("<|turn>user\n").expect("encodes"));
    let mut images = Vec::new();
    for p in clips {
        for e in gemma_engine::sounds::encode(&tower, p, &|| false).expect("encodes") {
            prompt.push(s.boa_token_id);
            images.push(MediaSpan {
                source: None,
                at: prompt.len(),
                rows: e.rows.clone(),
                tokens: e.tokens,
                key: image_key(&e.bytes, 0),
                budget: 0,
                kind: MediaKind::Audio,
            });
            prompt.extend(std::iter::repeat_n(s.audio_token_id, e.tokens));
            prompt.push(s.eoa_token_id);
        }
    }
    let rest = format!("{text}<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    prompt.extend(tok.encode(&rest).expect("encodes"));
    let mut session = Session::new(&lm.model);
    let opts = TurnOptions {
        end_ids: lm.chat_end_ids(),
        ..TurnOptions::greedy(6, 1024)
    };
    let mut t = Turn::start_with(&mut session, prompt.clone(), images, opts).expect("starts");
    t.run(&lm.model, &mut session, &mut |_| true).expect("runs");
    let mut reply = Reply::new(None, Vec::new());
    let mut answer = String::new();
    for &id in t.answer() {
        if let Some(Piece::Answer(s)) = reply.push(tok, id).expect("decodes").0 {
            answer.push_str(&s);
        }
    }
    if let Some(Piece::Answer(s)) = reply.finish(tok).expect("decodes") {
        answer.push_str(&s);
    }
    (prompt.len(), answer)
}

#[test]
fn a_recording_in_a_chat_turn_is_answered_as_the_ids_path_and_kept_warm() {
    let dir = audio_fixture();
    let h = engine(dir.path());
    open(&h, 1);
    let first = submit(&h, 1, "What is it?", vec![Attachment::audio(clip("a.wav"))]);
    let (prompt_len, answer) = by_hand(dir.path(), &[&clip("a.wav")], "What is it?");
    let s = &first.stats;
    assert_eq!(s.reused_tokens + s.prefilled_tokens, prompt_len);
    assert_eq!(first.answer, answer);
    assert!(
        first
            .notices
            .iter()
            .any(|n| n.contains("encoding the recording a.wav")),
        "{:?}",
        first.notices
    );
    // A follow-up: the recording's keys and values stay, nothing is encoded again.
    let next = submit(&h, 1, "And then?", Vec::new());
    assert_eq!(next.stats.reuse, Reuse::ExactPrefix, "{:?}", next.stats);
    assert!(next.stats.reused_tokens > prompt_len);
    assert!(next.notices.is_empty(), "{:?}", next.notices);
    h.send(Command::Shutdown);
}

#[test]
fn two_recordings_and_a_picture_free_model() {
    let dir = audio_fixture();
    let h = engine(dir.path());
    open(&h, 1);
    let clips = [clip("a.wav"), clip("b.wav")];
    let attach = clips.iter().map(|p| Attachment::audio(p.clone())).collect();
    let done = submit(&h, 1, "Which is longer?", attach);
    let paths: Vec<&Path> = clips.iter().map(PathBuf::as_path).collect();
    let (prompt_len, answer) = by_hand(dir.path(), &paths, "Which is longer?");
    assert_eq!(done.stats.prefilled_tokens, prompt_len);
    assert_eq!(done.answer, answer);
    h.send(Command::Shutdown);
}

#[test]
fn a_text_only_model_says_so_when_a_recording_comes() {
    let dir = crate::common::chat::fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    open(&h, 1);
    h.send(Command::Submit {
        tab: 1,
        text: "What is it?".into(),
        images: vec![Attachment::audio(clip("a.wav"))],
    });
    loop {
        match h.events.recv().expect("event") {
            Event::Failed { error, .. } => {
                assert!(error.contains("cannot hear recordings"), "{error}");
                break;
            }
            Event::Finished { .. } => panic!("answered without its recording"),
            _ => {}
        }
    }
    h.send(Command::Shutdown);
}

#[test]
fn a_broken_recording_fails_its_turn_with_the_reason() {
    let dir = audio_fixture();
    let tmp = tempfile::tempdir().expect("tmp");
    let bad = tmp.path().join("bad.wav");
    std::fs::write(&bad, b"RIFF\x10\0\0\0WAVEfmt junk").expect("write");
    let h = engine(dir.path());
    open(&h, 1);
    h.send(Command::Submit {
        tab: 1,
        text: "Hear this".into(),
        images: vec![Attachment::audio(bad)],
    });
    loop {
        match h.events.recv().expect("event") {
            Event::Failed { error, .. } => {
                assert!(error.contains("bad.wav"), "{error}");
                break;
            }
            Event::Finished { .. } => panic!("answered a broken recording"),
            _ => {}
        }
    }
    // The tab goes on.
    let after = submit(&h, 1, "Hello", Vec::new());
    assert!(after.stats.generated_tokens > 0);
    h.send(Command::Shutdown);
}

/// A message whose recording alone cannot fit the tab's context is refused before the clip is
/// resampled, cut or encoded (probe 2026-12-06, F4: a 59-minute WAV took 42 s and 1.1 GB, then
/// "context exceeded", and left its pieces behind): no "encoding" notice, no kept piece, and the
/// tab goes on.
#[test]
fn a_recording_that_cannot_fit_is_refused_before_it_is_encoded() {
    let dir = audio_fixture();
    let tmp = tempfile::tempdir().expect("tmp");
    let long = tmp.path().join("long.wav");
    // 70 s of noise: three pieces, about 1,750 soft tokens.
    let mut x: u32 = 1;
    let noise: Vec<f32> = (0..16_000 * 70)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect();
    let wav = gemma_media::Clip::from_samples(&noise, 16_000, 1)
        .expect("a clip")
        .to_wav();
    std::fs::write(&long, wav).expect("wav");
    let h = engine(dir.path());
    open(&h, 1);
    let settings = TabSettings {
        context: Some(512),
        ..short_answers()
    };
    configure(&h, 1, settings);
    h.send(Command::Submit {
        tab: 1,
        text: "Hear this".into(),
        images: vec![Attachment::audio(long)],
    });
    loop {
        match h.events.recv().expect("event") {
            Event::Failed { error, .. } => {
                assert!(
                    error.contains("alone take") && error.contains("the context holds 512"),
                    "{error}"
                );
                break;
            }
            Event::Notice { text, .. } => {
                assert!(!text.contains("encoding"), "encoded first: {text}")
            }
            Event::Finished { .. } => panic!("answered a recording that cannot fit"),
            _ => {}
        }
    }
    let after = submit(&h, 1, "Hello", Vec::new());
    assert!(after.stats.generated_tokens > 0);
    h.send(Command::Shutdown);
}

/// Runs the binary on the fixture copy `dir` with `args`; its status, stdout and stderr.
fn binary(dir: &Path, args: &[&str]) -> (bool, i32, String, String) {
    let tmp = tempfile::tempdir().expect("tmp");
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, "").expect("config");
    let out = Process::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .arg("--model")
        .arg(dir)
        .arg("--config")
        .arg(&config)
        .args(["--temperature", "0", "--max-new-tokens", "3"])
        .args(args)
        .env("GEMMA_CHAT_DATA_DIR", tmp.path().join("data"))
        .output()
        .expect("runs");
    (
        out.status.success(),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_headless_front_doors_send_recordings() {
    let dir = audio_fixture();
    let a = clip("a.wav");
    let a_str = a.to_string_lossy().into_owned();
    let (prompt_len, _) = by_hand(dir.path(), &[&a], "What is it?");
    let chat = ["generate", "--chat", "--prompt", "What is it?", "--json"];
    let (ok, _, json, err) = binary(dir.path(), &[&chat[..], &["--audio", &a_str]].concat());
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
    assert_eq!(v["prompt_tokens"], prompt_len, "{v}");
    let (ok, _, _, err) = binary(dir.path(), &["--prompt", "What is it?", "--audio", &a_str]);
    assert!(ok, "{err}");
    assert!(err.contains("encoding the recording a.wav"), "{err}");
    assert!(err.contains(&format!("prefilled {prompt_len}")), "{err}");
    let (ok, _, _, err) = binary(dir.path(), &["--prompt", "What is it?", "--attach", &a_str]);
    assert!(ok, "{err}");
    assert!(err.contains(&format!("prefilled {prompt_len}")), "{err}");
}

/// The reference prompt's ids with its recordings, as `generate --ids` takes them.
fn reference_ids() -> Vec<u32> {
    let text = std::fs::read_to_string(clip("reference.json")).expect("reference");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["prompt_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|i| i.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn generate_fills_audio_runs_and_refuses_a_wrong_length() {
    let dir = audio_fixture();
    let ids = reference_ids();
    let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let (a, b) = (clip("a.wav"), clip("b.wav"));
    let (a, b) = (a.to_string_lossy(), b.to_string_lossy());
    let run = |ids: &str, files: &[&str]| {
        let mut args = vec!["generate", "--ids", ids, "--json"];
        for f in files {
            args.extend(["--audio", f]);
        }
        binary(dir.path(), &args)
    };
    let (ok, _, json, err) = run(&list(&ids), &[&a, &b]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
    let text = std::fs::read_to_string(clip("reference.json")).expect("reference");
    let r: serde_json::Value = serde_json::from_str(&text).expect("json");
    let greedy: Vec<u64> = r["greedy_ids"]
        .as_array()
        .expect("greedy")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    let got: Vec<u64> = v["generated_ids"]
        .as_array()
        .expect("generated")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    let n = got.len().min(greedy.len());
    assert!(n >= 4, "{v}");
    assert_eq!(got[..n], greedy[..n], "{v}");
    // One placeholder fewer in the first run: refused with both counts, exit 2.
    let audio = ids[ids.iter().position(|&i| i == 504).expect("boa") + 1];
    let cut = ids.iter().position(|&i| i == audio).expect("a placeholder");
    let mut short = ids.clone();
    short.remove(cut);
    let (ok, code, _, err) = run(&list(&short), &[&a, &b]);
    assert!(!ok && code == 2, "{code}: {err}");
    assert!(err.contains("run of audio placeholders"), "{err}");
    // A recording too many.
    let (ok, code, _, err) = run(&list(&ids), &[&a, &b, &a]);
    assert!(!ok && code == 2, "{code}: {err}");
    assert!(err.contains("2 run(s) of audio placeholders"), "{err}");
}

/// An engine on the fixture copy in `dir` that keeps conversations beside it.
fn engine_kept(dir: &Path) -> EngineHandle {
    let path = dir.to_path_buf();
    let options = EngineOptions {
        convo_dir: Some(crate::common::chat::convos(dir)),
        ..EngineOptions::default()
    };
    let h = spawn(options, move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    });
    assert!(matches!(first_after_loading(&h), Event::Ready { .. }));
    h
}

#[test]
fn a_restart_brings_a_chat_back_with_its_recording() {
    let dir = audio_fixture();
    let tmp = tempfile::tempdir().expect("tmp");
    let recording = tmp.path().join("memo.wav");
    std::fs::copy(clip("a.wav"), &recording).expect("copy");
    let attach = vec![Attachment::audio(recording.clone())];
    let h = engine_kept(dir.path());
    open(&h, 1);
    let first = submit(&h, 1, "What is it?", attach.clone());
    h.send(Command::Shutdown);
    drop(h);
    // The same two turns without a restart, for comparison.
    let other = audio_fixture();
    let h = engine(other.path());
    open(&h, 1);
    submit(&h, 1, "What is it?", attach);
    let warm = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    drop(h);
    std::fs::remove_file(&recording).expect("the original goes");
    let h = engine_kept(dir.path());
    h.send(Command::Attach {
        tab: 1,
        chat: crate::common::chat::chat(1),
        history: vec![Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: "What is it?".into(),
            answer: first.answer.clone(),
        }],
        legacy: None,
    });
    configure(&h, 1, short_answers());
    // From the kept copy, the original gone: the whole chat prefilled once, the same answer.
    let again = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    assert_eq!(again.stats.reuse, Reuse::Restored, "{:?}", again.stats);
    assert_eq!(again.answer, warm.answer);
    // Its piece encoded once, when that prefill reached it.
    assert_eq!(
        again.notices,
        ["encoding a recording of the conversation again: this turn prefills it"]
    );
}
