//! A warm tab's history is what the chat template writes. On the tiny Gemma 4 fixtures with the
//! official Gemma 4 31B-it template (and with the built-in layout), conversations of one to four
//! turns, thinking on, off and toggled, with and without a system prompt: after every turn the
//! tab's ids equal the tokenization of the template's render of the same conversation, answers
//! spliced in as sampled. The one difference is pinned: the official template drops the empty
//! thought block from past model turns that it writes into the generation prompt with thinking
//! off, and gemma-chat keeps it (as Google's later templates do), so the history stays a prefix
//! of the next prompt. A restored tab's ids equal a warm tab's, the older saved form included, and
//! a chat with only its transcript is rebuilt to read the same.

use std::path::Path;
use std::time::Duration;

use gemma_engine::EngineHandle;
use gemma_engine::protocol::Reuse;
use gemma_engine::protocol::{Command, Event, Exchange, LegacyConvo, TabId, TabSettings};
use gemma_model::tokenizer::Tokenizer;
use gemma_model::tokenizer::template::{ChatTemplate, TemplateSource};
use serde_json::json;

use crate::common::chat::{
    chat, configure, convos, engine, fixture, open, root, short_answers, store,
};

const PRIMER: &str = "<|channel>thought\n<channel|>";
const OFFICIAL: &str = "tests/fixtures/templates/official/gemma4-31b-it.jinja";
const BUILTIN: &str = "assets/templates/gemma4.jinja";

/// What a finished turn committed.
struct Turn {
    ids: Vec<u32>,
    header: usize,
    last_answer: Option<usize>,
    reuse: Reuse,
    reused: usize,
}

/// Sends `text` to `tab` and waits for its turn to finish and commit; the conversation is the
/// one the engine saved for the tab's chat.
fn turn(h: &EngineHandle, dir: &Path, tab: TabId, text: &str) -> Turn {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images: Vec::new(),
    });
    let mut committed = None;
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Committed { tab: t, tokens } if t == tab => committed = Some(tokens),
            Event::Finished { tab: t, stats, .. } if t == tab => {
                let tokens = committed.expect("committed before finished");
                let saved = store(dir)
                    .load(&chat(tab))
                    .expect("the engine saved the chat");
                assert_eq!(saved.ids.len(), tokens);
                return Turn {
                    ids: saved.ids,
                    header: saved.header,
                    last_answer: saved.last_answer,
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
    open(h, tab);
    let settings = TabSettings {
        system: system.map(str::to_string),
        thinking,
        ..short_answers()
    };
    configure(h, tab, settings);
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
        .render(&json!(messages), false, Some(thinking_now), None)
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
        let t = turn(&h, dir.path(), 1, texts[i]);
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
    let d = dir.path();
    let tok = Tokenizer::from_file(&d.join("tokenizer.json")).expect("tokenizer");
    let h = engine(d);
    let system = Some("Answer in one line.");
    setup(&h, 1, system, true);
    let questions = ["First question", "Second question"];
    let mut answers = Vec::new();
    let mut two = None;
    for q in questions {
        let t = turn(&h, d, 1, q);
        let from = t.last_answer.expect("an answer");
        answers.push(tok.decode(&t.ids[from..], true).expect("text"));
        two = Some(t);
    }
    let two = two.expect("two turns");

    // Tab 2's chat is one the engine saved (a copy of tab 1's, as after a restart); tab 3's is
    // a chat of an earlier release, which held the ids itself, closed by the end id and with a
    // header ending before the first user turn; tab 4's has only its transcript.
    std::fs::copy(
        convos(d).join("tab-1.json"),
        convos(d).join(format!("{}.json", chat(2))),
    )
    .expect("copy");
    let opening = tok.encode("<|turn>user\n").expect("ids");
    let mut legacy = two.ids.clone();
    legacy.push(106);
    let history: Vec<Exchange> = questions
        .iter()
        .zip(&answers)
        .map(|(q, a)| Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: q.to_string(),
            answer: a.clone(),
        })
        .collect();
    for tab in [2, 3, 4] {
        let settings = TabSettings {
            system: system.map(str::to_string),
            thinking: true,
            ..TabSettings::default()
        };
        configure(&h, tab, settings);
        h.send(Command::Attach {
            tab,
            chat: chat(tab),
            history: if tab == 4 {
                history.clone()
            } else {
                Vec::new()
            },
            legacy: (tab == 3).then(|| LegacyConvo {
                ids: legacy.clone(),
                header: two.header - opening.len(),
                last_answer: two.last_answer,
            }),
        });
    }
    let mut attached = Vec::new();
    while attached.len() < 3 {
        match h
            .events
            .recv_timeout(Duration::from_secs(60))
            .expect("event")
        {
            Event::Committed { tab, tokens } => attached.push((tab, tokens)),
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    attached.sort();
    assert_eq!(attached[0], (2, two.ids.len()), "the saved chat as it was");
    assert_eq!(
        attached[1],
        (3, two.ids.len()),
        "the earlier form, brought to today's"
    );
    // The legacy chat is saved in today's form at once.
    assert_eq!(
        store(d).load(&chat(3)).map(|c| c.ids),
        Some(two.ids.clone())
    );

    let warm = turn(&h, d, 1, "Third question");
    for tab in [2, 3] {
        setup(&h, tab, system, true);
        let restored = turn(&h, d, tab, "Third question");
        assert_eq!(restored.ids, warm.ids, "tab {tab}");
        assert_eq!(restored.header, warm.header, "tab {tab}");
        assert_eq!(restored.reuse, Reuse::Restored, "tab {tab}");
    }
    assert_eq!(warm.reuse, Reuse::ExactPrefix);
    // From text: the same turns rendered again, the answers as they read; the next turn
    // prefills it all, and its prompt reads as the warm tab's (the ids may differ where the
    // sampled answer was not the canonical tokenization of its text, and so may the answer).
    setup(&h, 4, system, true);
    let rebuilt = turn(&h, d, 4, "Third question");
    assert_eq!(rebuilt.reuse, Reuse::Restored);
    assert_eq!(rebuilt.header, warm.header);
    let prompt = |t: &Turn| {
        let at = t.last_answer.expect("an answer");
        tok.decode(&t.ids[..at], false).expect("text")
    };
    assert_eq!(
        prompt(&rebuilt),
        prompt(&warm),
        "the rebuilt conversation reads as the warm one"
    );
}

/// A Gemma 4 chat layout whose render first runs `prelude` (Jinja statements).
fn layout_after(prelude: &str) -> String {
    String::from("{{ bos_token }}")
        + prelude
        + "{% for m in messages %}<|turn>{{ 'model' if m.role == 'assistant' else m.role }}\n\
           {{ m.content | trim }}<turn|>\n{% endfor %}\
           {% if add_generation_prompt %}<|turn>model\n<|channel>thought\n<channel|>{% endif %}"
}

/// A checkpoint's template that outgrows its memory on the second turn (it grows with the
/// conversation, so a render at load would pass it): that turn is answered with the built-in
/// layout and the user is told why, once; the app's memory is untouched.
#[test]
fn a_template_that_outgrows_its_memory_is_refused_and_the_builtin_layout_answers() {
    let dir = fixture("gemma4_moe", None);
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        layout_after(
            "{% if messages|length > 2 %}{% set ns = namespace(s='x') %}\
             {% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% endif %}",
        ),
    )
    .expect("template");
    let h = engine(dir.path());
    setup(&h, 1, None, false);
    let first = turn(&h, dir.path(), 1, "Hi there");
    assert_eq!(first.reuse, Reuse::New);
    h.send(Command::Submit {
        tab: 1,
        text: "Again".into(),
        images: Vec::new(),
    });
    let (mut warned, mut finished) = (Vec::new(), false);
    while !finished {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::TemplateFallback { error, .. } => warned.push(error),
            Event::Finished { stats, .. } => {
                // The built-in layout continues the same conversation warm.
                assert_eq!(stats.reuse, Reuse::ExactPrefix);
                assert_eq!(stats.reused_tokens, first.ids.len());
                finished = true;
            }
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("chat_template.jinja") && warned[0].contains("MiB of memory"),
        "{}",
        warned[0]
    );
    // The tab goes on (the refused template is not run again: see the unit test in turns.rs).
    turn_with_fallback(&h, 1, "And again");
}

/// Sends `text` and waits for the turn to finish, a template fallback allowed.
fn turn_with_fallback(h: &EngineHandle, tab: TabId, text: &str) {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images: Vec::new(),
    });
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Finished { tab: t, .. } if t == tab => return,
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
}

/// A transcript longer than the model's context can hold (the tiny fixture: 512 tokens, so
/// room for 64 exchanges) is refused before any of it is rendered, with what to do, and the
/// engine goes on serving the tab.
#[test]
fn a_transcript_longer_than_the_context_is_refused_unrendered() {
    let m = fixture("gemma4_e2b_style", None);
    let d = m.path();
    let h = engine(d);
    let history: Vec<Exchange> = (0..10_000)
        .map(|i| Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: format!("question {i}"),
            answer: format!("answer {i}"),
        })
        .collect();
    h.send(Command::Attach {
        tab: 1,
        chat: chat(1),
        history,
        legacy: None,
    });
    let error = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(60))
            .expect("event")
        {
            Event::Failed { tab: 1, error } => break error,
            Event::Committed { tab: 1, tokens } => panic!("attached {tokens} tokens"),
            _ => {}
        }
    };
    assert!(
        error.contains("10000 exchanges") && error.contains("context of 512 tokens"),
        "{error}"
    );
    let t = turn(&h, d, 1, "Hi");
    assert_eq!(
        t.reuse,
        Reuse::New,
        "the next turn starts the conversation over"
    );
}

/// A render the user stops (Esc, a closed tab, quitting) ends within a poll of the sandbox: the
/// turn fails saying so, no layout stands in for it, and the template renders the next turn.
#[test]
fn a_slow_render_is_stopped_by_a_cancel() {
    let dir = fixture("gemma4_moe", None);
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        layout_after(
            "{% if 'slow' in messages[-1].content %}{% set s = 'x' * 50000000 %}\
             {% for i in range(100000) %}{% set t = s | upper %}{% endfor %}{% endif %}",
        ),
    )
    .expect("template");
    let h = engine(dir.path());
    setup(&h, 1, None, false);
    h.send(Command::Submit {
        tab: 1,
        text: "slow, please".into(),
        images: Vec::new(),
    });
    // The render takes minutes (its sandbox's 10 s limit would end it as a refusal); the cancel
    // comes while it runs.
    std::thread::sleep(Duration::from_millis(500));
    h.send(Command::Cancel { tab: 1 });
    let error = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Failed { tab: 1, error } => break error,
            Event::TemplateFallback { error, .. } => panic!("a layout stood in: {error}"),
            Event::Finished { .. } => panic!("the render was not stopped"),
            _ => {}
        }
    };
    assert!(
        error.contains("chat_template.jinja") && error.contains("was stopped"),
        "{error}"
    );
    let t = turn(&h, dir.path(), 1, "Hi there");
    assert_eq!(t.reuse, Reuse::New);
}
