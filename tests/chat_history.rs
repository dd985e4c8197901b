//! A warm tab's history is what the chat template writes. On the tiny Gemma 4 fixtures with the
//! official Gemma 4 31B-it template (and with the built-in layout), conversations of one to four
//! turns, thinking on, off and toggled, with and without a system prompt: after every turn the
//! tab's ids equal the tokenization of the template's render of the same conversation, answers
//! spliced in as sampled. The one difference is pinned: the official template drops the empty
//! thought block from past model turns that it writes into the generation prompt with thinking
//! off, and gemma-chat keeps it (as Google's later templates do), so the history stays a prefix
//! of the next prompt. A restored tab's ids equal a warm tab's, the older saved form included.

use std::path::{Path, PathBuf};
use std::time::Duration;

use burn::tensor::Device;
use gemma_chat::engine::protocol::Reuse;
use gemma_chat::engine::protocol::{Command, Event, TabId};
use gemma_chat::engine::{EngineHandle, EngineOptions, spawn};
use gemma_chat::load::load;
use gemma_chat::model::ComputeDtype;
use gemma_chat::sampling::SamplingParams;
use gemma_chat::tokenizer::Tokenizer;
use gemma_chat::tokenizer::template::{ChatTemplate, TemplateSource};
use serde_json::json;

const PRIMER: &str = "<|channel>thought\n<channel|>";
const OFFICIAL: &str = "tests/fixtures/templates/official/gemma4-31b-it.jinja";
const BUILTIN: &str = "assets/templates/gemma4.jinja";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A copy of a Gemma 4 oracle fixture with the tiny Gemma 4 tokenizer and, if given, a
/// `chat_template.jinja`.
fn fixture(name: &str, template: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let from = root().join("tests/fixtures/oracle").join(name);
    for e in std::fs::read_dir(&from).expect("fixture") {
        let p = e.expect("entry").path();
        let n = p.file_name().expect("name").to_string_lossy().into_owned();
        if !n.starts_with("reference") {
            std::fs::copy(&p, dir.path().join(&n)).expect("copy");
        }
    }
    std::fs::copy(
        root().join("tests/fixtures/tiny_chat_gemma4/tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .expect("tokenizer");
    if let Some(t) = template {
        std::fs::copy(root().join(t), dir.path().join("chat_template.jinja")).expect("template");
    }
    dir
}

fn engine(dir: &Path) -> EngineHandle {
    let path: PathBuf = dir.to_path_buf();
    let h = spawn(EngineOptions::default(), move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    });
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("loads")
        {
            Event::Loading { .. } => {}
            Event::Ready { thinking, .. } => {
                assert!(
                    thinking,
                    "the tiny Gemma 4 tokenizer has the thinking tokens"
                );
                return h;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// What a finished turn committed.
struct Turn {
    ids: Vec<u32>,
    header: usize,
    last_answer: Option<usize>,
    reuse: Reuse,
    reused: usize,
}

/// Sends `text` to `tab` and waits for its turn to finish and commit.
fn turn(h: &EngineHandle, tab: TabId, text: &str) -> Turn {
    h.send(Command::Submit {
        tab,
        text: text.into(),
    });
    let mut committed = None;
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Committed {
                tab: t,
                ids,
                header,
                last_answer,
            } if t == tab => committed = Some((ids, header, last_answer)),
            Event::Finished { tab: t, stats, .. } if t == tab => {
                let (ids, header, last_answer) = committed.expect("committed before finished");
                return Turn {
                    ids,
                    header,
                    last_answer,
                    reuse: stats.reuse,
                    reused: stats.reused_tokens,
                };
            }
            Event::Failed { error, .. } => panic!("failed: {error}"),
            Event::TemplateFallback { error, .. } => panic!("the template failed: {error}"),
            _ => {}
        }
    }
}

fn setup(h: &EngineHandle, tab: TabId, system: Option<&str>, thinking: bool) {
    h.send(Command::SetSampling {
        tab,
        sampling: SamplingParams::default(),
        max_new_tokens: 6,
        stop: Vec::new(),
    });
    h.send(Command::SetSystem {
        tab,
        text: system.map(str::to_string),
    });
    h.send(Command::SetThinking { tab, on: thinking });
}

/// The ids the template writes for `users` (each with the thinking setting it was sent with)
/// and the answers in `ids`, checked piece by piece against `ids`: everything but the answers
/// must be the tokenization of the template's render (its closing after the last answer left
/// out, since the next turn writes it), except that each model turn keeps the opening it was
/// run with (the empty thought block with thinking off, none with it on). Returns how many
/// blocks that added to the template's history, and how many it took away.
fn check_against_template(
    template: &str,
    tok: &Tokenizer,
    system: Option<&str>,
    users: &[(&str, bool)],
    ids: &[u32],
) -> (usize, usize) {
    let source = TemplateSource {
        text: std::fs::read_to_string(root().join(template)).expect("template"),
        origin: template.into(),
    };
    let t = ChatTemplate::new(&source, "<bos>", "<eos>").expect("compiles");
    let mark = |i: usize| format!("\u{E000}answer{i}\u{E001}");
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(json!({"role": "system", "content": s}));
    }
    for (i, (u, _)) in users.iter().enumerate() {
        messages.push(json!({"role": "user", "content": u}));
        messages.push(json!({"role": "assistant", "content": mark(i)}));
    }
    let thinking_now = users.last().expect("a turn").1;
    let mut text = t
        .render(&json!(messages), false, Some(thinking_now))
        .expect("renders");
    // The documented difference: a model turn keeps the opening it was run with.
    let (mut kept, mut dropped) = (0, 0);
    for (i, (_, thinking)) in users.iter().enumerate() {
        let at = text.find(&mark(i)).expect("answer in the render");
        let has = text[..at].ends_with(PRIMER);
        if !thinking && !has {
            text.insert_str(at, PRIMER);
            kept += 1;
        } else if *thinking && has {
            text.replace_range(at - PRIMER.len()..at, "");
            dropped += 1;
        }
    }
    let last = mark(users.len() - 1);
    let end = text.find(&last).expect("last answer") + last.len();
    let text = text[..end].strip_prefix("<bos>").expect("BOS first");
    assert_eq!(ids[0], 2, "BOS");
    let mut pos = 1;
    let mut rest = text;
    for i in 0..users.len() {
        let (piece, after) = rest.split_once(&mark(i)).expect("answer mark");
        let want = tok.encode(piece).expect("encodes");
        assert_eq!(
            &ids[pos..pos + want.len()],
            &want[..],
            "the template's text before answer {i}: {piece:?}"
        );
        pos += want.len();
        // The answer runs to where the template's next piece starts (it opens with <turn|>,
        // which no answer holds: it is a stop id), or to the end.
        let next = after.split('\u{E000}').next().unwrap_or_default();
        let next_ids = tok.encode(next).expect("encodes");
        if i + 1 == users.len() {
            pos = ids.len();
        } else {
            assert!(!next_ids.is_empty());
            pos += (0..=ids.len() - pos)
                .find(|&k| ids[pos + k..].starts_with(&next_ids))
                .expect("the template's next piece follows the answer");
        }
        rest = after;
    }
    assert_eq!(pos, ids.len());
    (kept, dropped)
}

/// Runs a conversation in one tab and checks each turn against the template.
fn conversation(
    template: Option<&str>,
    fixture_name: &str,
    system: Option<&str>,
    thinking: &[bool],
) -> Vec<Turn> {
    let dir = fixture(fixture_name, template);
    let tok = Tokenizer::from_file(&dir.path().join("tokenizer.json")).expect("tokenizer");
    let h = engine(dir.path());
    let texts = [
        "Hi there",
        "  Tell me a joke. \n",
        "Why?",
        "One more, in French.",
    ];
    let mut users = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    for (i, &on) in thinking.iter().enumerate() {
        if i > 0 && thinking[i - 1] {
            // Under `strip` an answer that had a thought is re-prefilled without it in the
            // background (a few milliseconds here); let it settle so the turn sees it done.
            std::thread::sleep(Duration::from_millis(300));
        }
        setup(&h, 1, system, on);
        let t = turn(&h, 1, texts[i]);
        users.push((texts[i], on));
        let (kept, dropped) =
            check_against_template(template.unwrap_or(BUILTIN), &tok, system, &users, &t.ids);
        let what =
            format!("{fixture_name} {template:?} system {system:?} thinking {thinking:?} turn {i}");
        match template {
            // The official template writes the empty block into the generation prompt only.
            Some(_) => assert_eq!(
                (kept, dropped),
                (users.iter().filter(|(_, on)| !on).count(), 0),
                "{what}"
            ),
            None => {
                let toggled = users.iter().any(|(_, on)| *on != users[i].1);
                if !toggled {
                    assert_eq!(
                        (kept, dropped),
                        (0, 0),
                        "the built-in layout writes history as held: {what}"
                    );
                }
            }
        }
        // The history was a prefix of the new prompt unless the header changed.
        if let Some(prev) = turns.last() {
            if thinking[i] == thinking[i - 1] {
                assert_eq!(t.reuse, Reuse::ExactPrefix, "{what}");
                assert_eq!(t.reused, prev.ids.len(), "{what}");
            } else {
                // Back to the header: a rewind, or a full prefill where the sliding window has
                // moved past it.
                assert!(
                    matches!(t.reuse, Reuse::Rewind | Reuse::Mismatch),
                    "the header changed: {what}: {:?}",
                    t.reuse
                );
                assert!(t.reused < prev.ids.len(), "{what}");
            }
        } else {
            assert_eq!(t.reuse, Reuse::New);
        }
        turns.push(t);
    }
    turns
}

#[test]
fn warm_history_is_the_official_templates_history() {
    for fixture_name in ["gemma4_e2b_style", "gemma4_31b_style_bf16"] {
        for system in [None, Some("Be brief.")] {
            for thinking in [
                &[false, false, false, false][..],
                &[true, true, true, true][..],
                &[false, true, false][..],
                &[true][..],
            ] {
                conversation(Some(OFFICIAL), fixture_name, system, thinking);
            }
        }
    }
}

#[test]
fn warm_history_is_the_builtin_layouts_history() {
    for system in [None, Some("Be brief.")] {
        for thinking in [
            &[false, false, false][..],
            &[true, true][..],
            &[true, false][..],
        ] {
            conversation(None, "gemma4_moe", system, thinking);
        }
    }
}

#[test]
fn a_restored_tab_holds_what_a_warm_tab_holds() {
    let dir = fixture("gemma4_e4b_style", Some(OFFICIAL));
    let tok = Tokenizer::from_file(&dir.path().join("tokenizer.json")).expect("tokenizer");
    let h = engine(dir.path());
    let system = Some("Answer in one line.");
    setup(&h, 1, system, true);
    turn(&h, 1, "First question");
    let two = turn(&h, 1, "Second question");

    // Tab 2 comes back from disk as saved today; tab 3 as saved before 0.2: closed by its stop
    // id, its header ending before the first user turn.
    let opening = tok.encode("<|turn>user\n").expect("ids");
    let mut legacy = two.ids.clone();
    legacy.push(106);
    let legacy_header = two.header - opening.len();
    for (tab, ids, header) in [(2, two.ids.clone(), two.header), (3, legacy, legacy_header)] {
        setup(&h, tab, system, true);
        h.send(Command::Restore {
            tab,
            ids,
            header,
            last_answer: two.last_answer,
        });
    }
    let mut normalized = None;
    while normalized.is_none() {
        match h
            .events
            .recv_timeout(Duration::from_secs(60))
            .expect("event")
        {
            Event::Committed {
                tab: 3,
                ids,
                header,
                ..
            } => normalized = Some((ids, header)),
            Event::Committed { tab: 2, .. } => panic!("today's form is taken as it is"),
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    assert_eq!(normalized, Some((two.ids.clone(), two.header)));

    let warm = turn(&h, 1, "Third question");
    for tab in [2, 3] {
        let restored = turn(&h, tab, "Third question");
        assert_eq!(restored.ids, warm.ids, "tab {tab}");
        assert_eq!(restored.header, warm.header, "tab {tab}");
        assert_eq!(restored.reuse, Reuse::Restored, "tab {tab}");
    }
    assert_eq!(warm.reuse, Reuse::ExactPrefix);
}
