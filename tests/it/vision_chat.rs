//! Pictures in a chat turn, through the engine protocol: the turn a `Submit` with an attachment
//! builds is the checkpoint's own layout with the picture expanded as transformers' processor
//! expands it (begin-image, its placeholders, end-image), answered as the `--ids` path answers
//! it; a follow-up reuses the picture without encoding it again; and the headless front doors
//! (`--prompt --image`, `generate --chat --image`) send it. On a copy of the E2B-style image+text
//! fixture with the tiny Gemma 4 tokenizer (its image markers at the fixture's ids).

use std::path::Path;
use std::process::Command as Process;

use burn::tensor::Device;
use gemma_engine::images::{MediaSpan, image_key};
use gemma_engine::protocol::{Attachment, Command, Event, Exchange, Reuse, TabSettings, TurnStats};
use gemma_engine::reply::{Piece, Reply};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_engine::{EngineHandle, EngineOptions, spawn};
use gemma_model::checkpoint::load;
use gemma_model::model::ComputeDtype;

use crate::common::chat::{
    Done, configure, engine, first_after_loading, fixture_at, open, root, short_answers, submit,
};

pub(crate) const BUDGET: usize = 70;

pub(crate) fn vision_fixture() -> tempfile::TempDir {
    fixture_at(&root().join("tests/fixtures/vision/e2b_style"), None)
}

/// The answer of the `--ids` path (a fresh session) to the built-in layout of `text` after the
/// `pictures`: the prompt's length and the answer's text.
pub(crate) fn by_hand(dir: &Path, pictures: &[&Path], text: &str) -> (usize, String) {
    let mut lm = load(dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("loads");
    let tower = gemma_model::vision::open_for(&mut lm, None, None).expect("a tower");
    let tok = lm.tokenizer.as_ref().expect("tokenizer");
    let mut prompt = vec![2];
    prompt.extend(tok.encode("<|turn>user\n").expect("encodes"));
    let mut images = Vec::new();
    for p in pictures {
        let e = gemma_engine::pictures::encode(&tower, p, BUDGET).expect("encodes");
        prompt.push(500);
        images.push(MediaSpan {
            source: None,
            at: prompt.len(),
            rows: e.rows.clone(),
            tokens: e.tokens,
            key: image_key(&std::fs::read(p).expect("picture"), BUDGET),
            budget: BUDGET,
            kind: gemma_engine::protocol::MediaKind::Image,
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
    let (dir, picture, h) = picture_engine(&[1]);
    let attach = vec![Attachment::image(picture.clone(), BUDGET)];
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
        .map(|p| Attachment::image(p.clone(), BUDGET))
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
        images: vec![Attachment::image(
            root().join("tests/fixtures/vision/e2b_style/a.png"),
            BUDGET,
        )],
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

/// An engine on the fixture copy in `dir` that keeps conversations beside it and, with `kv`,
/// warm KV snapshots there too.
fn engine_kept(dir: &Path, kv: bool) -> EngineHandle {
    let path = dir.to_path_buf();
    let options = EngineOptions {
        convo_dir: Some(crate::common::chat::convos(dir)),
        kv_dir: kv.then(|| dir.join("kv")),
        kv_disk_bytes: if kv { 1 << 30 } else { 0 },
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

/// A chat with a picture (from a file deleted once it is sent) and a follow-up; after a restart
/// (with `kv`: warm), the chat answers the follow-up again: its reuse, and whether the answer
/// is the one given before the restart.
fn restart_with_picture(kv: bool, lose_copies: bool) -> (Done, bool, TurnStats) {
    restart_with_pictures(1, kv, lose_copies)
}

/// [`restart_with_picture`] with `n` pictures in the first message.
fn restart_with_pictures(n: usize, kv: bool, lose_copies: bool) -> (Done, bool, TurnStats) {
    let dir = vision_fixture();
    let tmp = tempfile::tempdir().expect("tmp");
    let copy = |i: usize| {
        let picture = tmp.path().join(format!("photo{i}.png"));
        let from = ["a.png", "b.png"][i % 2];
        std::fs::copy(
            root().join("tests/fixtures/vision/e2b_style").join(from),
            &picture,
        )
        .expect("copy");
        picture
    };
    let pictures: Vec<_> = (0..n).map(copy).collect();
    let h = engine_kept(dir.path(), kv);
    open(&h, 1);
    let attach: Vec<Attachment> = pictures
        .iter()
        .map(|p| Attachment::image(p.clone(), BUDGET))
        .collect();
    let first = submit(&h, 1, "What is it?", attach.clone());
    for p in &pictures {
        std::fs::remove_file(p).expect("the original goes");
    }
    h.send(Command::Shutdown);
    drop(h);
    // The same two turns without a restart, for comparison.
    let other = vision_fixture();
    let h = engine(other.path());
    open(&h, 1);
    (0..n).for_each(|i| {
        copy(i);
    });
    submit(&h, 1, "What is it?", attach);
    let warm = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    drop(h);
    if lose_copies {
        std::fs::remove_dir_all(crate::common::chat::convos(dir.path()).join("media"))
            .expect("the kept copies go");
    }
    let h = engine_kept(dir.path(), kv);
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
    let again = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    let same = again.answer == warm.answer;
    (again, same, first.stats)
}

#[test]
fn a_restart_brings_a_chat_back_with_its_picture() {
    // From the kept copy, the original gone: the whole chat prefilled once, the same answer;
    // the tower runs when that prefill needs the picture's rows, not when the chat comes back.
    let (again, same, _) = restart_with_picture(false, false);
    assert_eq!(again.stats.reuse, Reuse::Restored, "{:?}", again.stats);
    assert!(same, "the follow-up answers as it did before the restart");
    assert_eq!(again.notices.len(), 1, "{:?}", again.notices);
    assert!(again.notices[0].contains("encoding a picture of the conversation again"));
    // Warm: the snapshot holds the picture's keys and values, only the new turn is prefilled.
    let (again, same, first) = restart_with_picture(true, false);
    assert_eq!(again.stats.reuse, Reuse::ExactPrefix, "{:?}", again.stats);
    let answered = first.reused_tokens + first.prefilled_tokens + first.generated_tokens;
    assert!(
        again.stats.reused_tokens + 1 >= answered,
        "{again:?} after {first:?}",
        again = again.stats
    );
    assert!(same);
    assert!(
        again.notices.is_empty(),
        "no tower runs: {:?}",
        again.notices
    );
}

/// Three pictures brought back warm: the follow-up reuses their keys and values, and no tower
/// runs, at the re-attach or after (issue 58; each run would be ~30 s on an E2B tower). Cold,
/// each is encoded once, when the prefill reaches it. The count is the notices: a kept copy is
/// encoded only by `Worker::fill_rows`, which says so each time.
#[test]
fn a_warm_re_attach_of_three_pictures_runs_no_tower() {
    let (again, same, _) = restart_with_pictures(3, true, false);
    assert_eq!(again.stats.reuse, Reuse::ExactPrefix, "{:?}", again.stats);
    assert!(same);
    assert!(again.notices.is_empty(), "{:?}", again.notices);
    let (again, same, _) = restart_with_pictures(3, false, false);
    assert!(same);
    let runs = again
        .notices
        .iter()
        .filter(|n| n.starts_with("encoding"))
        .count();
    assert_eq!(runs, 3, "{:?}", again.notices);
}

#[test]
fn a_chat_whose_pictures_are_gone_comes_back_from_its_text_and_says_so() {
    let (again, _, _) = restart_with_picture(false, true);
    assert!(
        again
            .notices
            .iter()
            .any(|n| n.contains("could not be brought back")),
        "{:?}",
        again.notices
    );
}

/// The E2B-style image fixture served by an engine with tabs `tabs` open, and the path of one of
/// its pictures.
fn picture_engine(tabs: &[u64]) -> (tempfile::TempDir, std::path::PathBuf, EngineHandle) {
    let dir = vision_fixture();
    let picture = root().join("tests/fixtures/vision/e2b_style/a.png");
    let h = engine(dir.path());
    for &tab in tabs {
        open(&h, tab);
    }
    (dir, picture, h)
}

/// Esc while a message's pictures are encoded stops before the next one: the turn fails with
/// the reason, nothing is kept with the chat, and the tab takes the next message (probe
/// 2026-12-06, F4).
#[test]
fn a_stop_while_pictures_encode_ends_the_turn_and_keeps_nothing() {
    let (dir, picture, h) = picture_engine(&[1]);
    let attach: Vec<Attachment> = (0..6)
        .map(|_| Attachment::image(picture.clone(), BUDGET))
        .collect();
    h.send(Command::Submit {
        tab: 1,
        text: "What are they?".into(),
        images: attach,
    });
    h.send(Command::Cancel { tab: 1 });
    let error = loop {
        match h
            .events
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("an event")
        {
            Event::Failed { tab: 1, error } => break error,
            Event::Finished { tab: 1, .. } => panic!("the turn ran"),
            _ => {}
        }
    };
    assert!(error.contains("stopped while its pictures"), "{error}");
    let media = crate::common::chat::convos(dir.path()).join("media");
    let kept = std::fs::read_dir(&media).map_or(0, |d| d.count());
    assert_eq!(kept, 0, "nothing kept for a message never sent");
    let done = submit(&h, 1, "Hello?", Vec::new());
    assert!(!done.answer.is_empty() || done.stats.generated_tokens > 0);
    h.send(Command::Shutdown);
}

/// A message's pictures are encoded a picture a step: another tab's turn, sent after it, goes
/// on between them and ends first (probe 2026-12-06, F4: every tab waited for the encoding).
#[test]
fn another_tabs_turn_goes_on_while_pictures_encode() {
    let (_dir, picture, h) = picture_engine(&[1, 2]);
    // Tab 1's turn after its pictures is shorter than tab 2's (one token against six): only
    // the encoding, a step a picture, can make it end last.
    let settings = TabSettings {
        max_new_tokens: 1,
        ..short_answers()
    };
    configure(&h, 1, settings);
    let attach: Vec<Attachment> = (0..8)
        .map(|_| Attachment::image(picture.clone(), BUDGET))
        .collect();
    h.send(Command::Submit {
        tab: 1,
        text: "What are they?".into(),
        images: attach,
    });
    h.send(Command::Submit {
        tab: 2,
        text: "Hello".into(),
        images: Vec::new(),
    });
    let mut finished = Vec::new();
    while finished.len() < 2 {
        match h
            .events
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("an event")
        {
            Event::Finished { tab, .. } => finished.push(tab),
            Event::Failed { tab, error } => panic!("tab {tab}: {error}"),
            _ => {}
        }
    }
    assert_eq!(
        finished,
        [2, 1],
        "the text turn ends while the pictures encode"
    );
    h.send(Command::Shutdown);
}

/// A message with a picture that overflows the context is sent again after the conversation
/// slides, with the picture as it was encoded the first time: the tower runs once.
#[test]
fn a_picture_sent_again_after_a_slide_is_not_encoded_again() {
    let (_dir, picture, h) = picture_engine(&[1]);
    let overflow = gemma_engine::protocol::Overflow {
        mode: gemma_engine::protocol::OverflowMode::Slide,
        at: 0.9,
        prompt: "Summarize.".into(),
    };
    let settings = TabSettings {
        context: Some(256),
        overflow,
        ..short_answers()
    };
    configure(&h, 1, settings);
    let mut used = 0;
    for i in 0.. {
        let done = submit(
            &h,
            1,
            &format!("Message {i}: the river and the hill."),
            Vec::new(),
        );
        used = done.stats.reused_tokens + done.stats.prefilled_tokens + done.stats.generated_tokens;
        if used > 200 {
            break;
        }
        assert!(i < 40, "the context fills");
    }
    let done = submit(&h, 1, "And this?", vec![Attachment::image(picture, BUDGET)]);
    let encodings = done
        .notices
        .iter()
        .filter(|n| n.starts_with("encoding"))
        .count();
    assert_eq!(encodings, 1, "{used} tokens before; {:?}", done.notices);
    assert!(
        done.stats.reused_tokens + done.stats.prefilled_tokens < used,
        "the conversation slid: {:?}",
        done.stats
    );
    h.send(Command::Shutdown);
}
