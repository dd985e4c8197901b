//! Pictures in a chat turn, through the engine protocol: the turn a `Submit` with an attachment
//! builds is the checkpoint's own layout with the picture expanded as transformers' processor
//! expands it (begin-image, its placeholders, end-image), answered as the `--ids` path answers
//! it; a follow-up reuses the picture without encoding it again; and the headless front doors
//! (`--prompt --image`, `generate --chat --image`) send it. On a copy of the E2B-style image+text
//! fixture with the tiny Gemma 4 tokenizer (its image markers at the fixture's ids).

use std::path::Path;
use std::process::Command as Process;

use burn::tensor::Device;
use gemma_engine::EngineHandle;
use gemma_engine::images::{Image, image_key};
use gemma_engine::protocol::{Attachment, Command, Event, Reuse, TabId, TurnStats};
use gemma_engine::reply::{Piece, Reply};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::checkpoint::load;
use gemma_model::model::ComputeDtype;

use crate::common::chat::{engine, fixture_at, open, root};

const BUDGET: usize = 70;

fn vision_fixture() -> tempfile::TempDir {
    fixture_at(&root().join("tests/fixtures/vision/e2b_style"), None)
}

/// A finished turn: its answer, its numbers and the notices it gave.
struct Done {
    answer: String,
    stats: TurnStats,
    notices: Vec<String>,
}

fn submit(h: &EngineHandle, tab: TabId, text: &str, images: Vec<Attachment>) -> Done {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images,
    });
    let (mut answer, mut notices) = (String::new(), Vec::new());
    loop {
        let e = h
            .events
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("an event");
        match e {
            Event::Token { tab: t, text } if t == tab => answer.push_str(&text),
            Event::Notice { tab: t, text } if t == tab => notices.push(text),
            Event::Finished { tab: t, stats, .. } if t == tab => {
                return Done {
                    answer,
                    stats,
                    notices,
                };
            }
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
}

/// The answer of the `--ids` path (a fresh session) to the built-in layout of `text` after the
/// `pictures`: the prompt's length and the answer's text.
fn by_hand(dir: &Path, pictures: &[&Path], text: &str) -> (usize, String) {
    let mut lm = load(dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("loads");
    let tower = gemma_model::vision::open_for(&mut lm, None).expect("a tower");
    let tok = lm.tokenizer.as_ref().expect("tokenizer");
    let mut prompt = vec![2];
    prompt.extend(tok.encode("<|turn>user\n").expect("encodes"));
    let mut images = Vec::new();
    for p in pictures {
        let e = gemma_engine::pictures::encode(&tower, p, BUDGET).expect("encodes");
        prompt.push(500);
        images.push(Image {
            at: prompt.len(),
            rows: e.rows.clone(),
            key: image_key(&std::fs::read(p).expect("picture"), BUDGET),
        });
        prompt.extend(std::iter::repeat_n(501, e.tokens));
        prompt.push(502);
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
    // The text as the engine streams it.
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
fn a_picture_in_a_chat_turn_is_answered_as_the_ids_path_and_kept_warm() {
    let dir = vision_fixture();
    let picture = root().join("tests/fixtures/vision/e2b_style/a.png");
    let h = engine(dir.path());
    open(&h, 1);
    let attach = vec![Attachment {
        path: picture.clone(),
        tokens: BUDGET,
    }];
    let first = submit(&h, 1, "What is it?", attach);
    let (prompt_len, answer) = by_hand(dir.path(), &[&picture], "What is it?");
    let s = &first.stats;
    assert_eq!(s.reused_tokens + s.prefilled_tokens, prompt_len);
    assert_eq!(first.answer.trim(), answer.trim());
    assert!(
        first.notices.iter().any(|n| n.contains("encoding a.png")),
        "{:?}",
        first.notices
    );

    // A follow-up: the picture's keys and values stay, nothing is encoded again.
    let next = submit(&h, 1, "And the colours?", Vec::new());
    assert_eq!(next.stats.reuse, Reuse::ExactPrefix, "{:?}", next.stats);
    assert!(next.stats.reused_tokens > prompt_len);
    assert!(next.notices.is_empty(), "{:?}", next.notices);

    // Regenerating the follow-up keeps the picture too.
    h.send(Command::Regenerate { tab: 1 });
    loop {
        match h.events.recv().expect("event") {
            Event::Finished { tab: 1, stats, .. } => {
                assert_ne!(stats.reuse, Reuse::New);
                break;
            }
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    h.send(Command::Shutdown);
}

#[test]
fn two_pictures_in_one_message() {
    let dir = vision_fixture();
    let pictures =
        ["a.png", "b.png"].map(|n| root().join("tests/fixtures/vision/e2b_style").join(n));
    let h = engine(dir.path());
    open(&h, 1);
    let attach = pictures
        .iter()
        .map(|p| Attachment {
            path: p.clone(),
            tokens: BUDGET,
        })
        .collect();
    let done = submit(&h, 1, "Which differs?", attach);
    let paths: Vec<&Path> = pictures.iter().map(|p| p.as_path()).collect();
    let (prompt_len, answer) = by_hand(dir.path(), &paths, "Which differs?");
    assert_eq!(done.stats.prefilled_tokens, prompt_len);
    assert_eq!(done.answer, answer);
    h.send(Command::Shutdown);
}

#[test]
fn a_text_only_model_says_so_when_a_picture_comes() {
    let dir = crate::common::chat::fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    open(&h, 1);
    h.send(Command::Submit {
        tab: 1,
        text: "What is it?".into(),
        images: vec![Attachment {
            path: root().join("tests/fixtures/vision/e2b_style/a.png"),
            tokens: BUDGET,
        }],
    });
    loop {
        match h.events.recv().expect("event") {
            Event::Failed { error, .. } => {
                assert!(error.contains("cannot take pictures"), "{error}");
                assert!(error.contains("no vision tower"), "{error}");
                break;
            }
            Event::Finished { .. } => panic!("answered without its picture"),
            _ => {}
        }
    }
    h.send(Command::Shutdown);
}

#[test]
fn the_headless_front_doors_send_pictures() {
    let dir = vision_fixture();
    let picture = root().join("tests/fixtures/vision/e2b_style/a.png");
    let (prompt_len, _) = by_hand(dir.path(), &[&picture], "What is it?");
    let tmp = tempfile::tempdir().expect("tmp");
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, "").expect("config");
    let run = |args: &[&str]| {
        let out = Process::new(env!("CARGO_BIN_EXE_gemma-chat"))
            .arg("--model")
            .arg(dir.path())
            .arg("--config")
            .arg(&config)
            .args(["--temperature", "0", "--max-new-tokens", "3"])
            .args(args)
            .arg("--image")
            .arg(&picture)
            .args(["--image-tokens", "70"])
            .env("GEMMA_CHAT_DATA_DIR", tmp.path().join("data"))
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {err}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    let (json, _) = run(&["generate", "--chat", "--prompt", "What is it?", "--json"]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
    assert_eq!(v["prompt_tokens"], prompt_len, "{v}");
    let (_, err) = run(&["--prompt", "What is it?"]);
    assert!(err.contains("encoding a.png"), "{err}");
    assert!(err.contains(&format!("prefilled {prompt_len}")), "{err}");
}

#[test]
fn a_chat_with_a_picture_comes_back_from_its_text_and_says_so() {
    let dir = vision_fixture();
    let picture = root().join("tests/fixtures/vision/e2b_style/a.png");
    let h = engine(dir.path());
    open(&h, 1);
    let attach = vec![Attachment {
        path: picture,
        tokens: BUDGET,
    }];
    let first = submit(&h, 1, "What is it?", attach);
    let with_picture = first.stats.reused_tokens + first.stats.prefilled_tokens;
    h.send(Command::Shutdown);
    drop(h);

    // Restarted: the saved ids held a picture the engine no longer has.
    let h = engine(dir.path());
    h.send(Command::Attach {
        tab: 1,
        chat: crate::common::chat::chat(1),
        history: vec![gemma_engine::protocol::Exchange {
            user: "What is it?".into(),
            answer: first.answer.clone(),
        }],
        legacy: None,
    });
    let next = submit(&h, 1, "And?", Vec::new());
    let tokens = next.stats.reused_tokens + next.stats.prefilled_tokens;
    assert!(
        tokens < with_picture,
        "{tokens} ≥ {with_picture}: placeholders came back"
    );
    assert!(
        next.notices
            .iter()
            .any(|n| n.contains("not kept across restarts")),
        "{:?}",
        next.notices
    );
    h.send(Command::Shutdown);
}
