//! The engine thread over the protocol, on the demo model: events name their tabs, turns in two
//! tabs interleave without bleeding, follow-ups prefill only the new turn, stop and close act
//! within a step, regenerate rewinds instead of starting over.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use burn::tensor::Device;
use gemma_engine::protocol::{Command, Event, TabId, TabSettings};
use gemma_engine::protocol::{Reuse, Tier, TurnEnd, TurnStats};
use gemma_engine::{EngineHandle, EngineOptions, spawn};
use gemma_model::checkpoint::load;
use gemma_model::demo;
use gemma_model::model::ComputeDtype;

use crate::common::chat::{configure, first_after_loading};

fn engine() -> EngineHandle {
    engine_with(EngineOptions::default())
}

fn engine_with(options: EngineOptions) -> EngineHandle {
    let h = start(options);
    match first_after_loading(&h) {
        Event::Ready { .. } => h,
        other => panic!("unexpected {other:?}"),
    }
}

/// Starts an engine on the demo model.
fn start(options: EngineOptions) -> EngineHandle {
    let path = demo::ensure(&mut demo::print_progress()).expect("demo model");
    spawn(options, move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    })
}

fn greedy(h: &EngineHandle, tab: TabId, max_new_tokens: usize) {
    let settings = TabSettings {
        max_new_tokens,
        ..TabSettings::default()
    };
    configure(h, tab, settings);
}

/// Collects events until every tab in `tabs` has finished; returns each tab's text and stats.
fn run_until_finished(h: &EngineHandle, tabs: &[TabId]) -> Vec<(String, TurnEnd, TurnStats)> {
    run_collecting_tiers(h, tabs).0
}

/// Like [`run_until_finished`], also returning the tier changes seen on the way.
#[allow(clippy::type_complexity)]
fn run_collecting_tiers(
    h: &EngineHandle,
    tabs: &[TabId],
) -> (Vec<(String, TurnEnd, TurnStats)>, Vec<(TabId, Tier)>) {
    let mut tiers = Vec::new();
    let mut out: Vec<Option<(String, TurnEnd, TurnStats)>> = vec![None; tabs.len()];
    let mut text = vec![String::new(); tabs.len()];
    while out.iter().any(Option::is_none) {
        let e = match h.events.recv_timeout(Duration::from_secs(120)) {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => panic!("no event for 120 s"),
            Err(RecvTimeoutError::Disconnected) => panic!("engine ended"),
        };
        match e {
            Event::Token { tab, text: t } => {
                let i = tabs.iter().position(|x| *x == tab).expect("a known tab");
                assert!(out[i].is_none(), "token after finish");
                text[i].push_str(&t);
            }
            Event::Finished { tab, end, stats } => {
                let i = tabs.iter().position(|x| *x == tab).expect("a known tab");
                out[i] = Some((std::mem::take(&mut text[i]), end, stats));
            }
            Event::Prefill { tab, .. } => assert!(tabs.contains(&tab)),
            Event::TabState { tab, tier } => tiers.push((tab, tier)),
            Event::Failed { tab, error } => panic!("tab {tab} failed: {error}"),
            Event::Committed { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let out = out.into_iter().map(|o| o.expect("finished")).collect();
    (out, tiers)
}

#[test]
fn tabs_interleave_without_bleed_and_follow_ups_stay_warm() {
    let h = engine();
    // Tab 1 alone, as the reference.
    greedy(&h, 1, 8);
    h.send(Command::Submit {
        tab: 1,
        text: "Name three colours.".into(),
        images: Vec::new(),
    });
    let alone = run_until_finished(&h, &[1]).remove(0);
    assert_eq!(alone.2.reuse, Reuse::New);
    assert!(!alone.0.is_empty());

    // The same first turn in tabs 2 and 3 at once, with a different message in tab 3.
    greedy(&h, 2, 8);
    greedy(&h, 3, 8);
    h.send(Command::Submit {
        tab: 2,
        text: "Name three colours.".into(),
        images: Vec::new(),
    });
    h.send(Command::Submit {
        tab: 3,
        text: "Count to five.".into(),
        images: Vec::new(),
    });
    let both = run_until_finished(&h, &[2, 3]);
    assert_eq!(both[0].0, alone.0, "tab 2 must answer as tab 1 did alone");
    // Tab 3 against its own solo run, in a fresh tab.
    greedy(&h, 4, 8);
    h.send(Command::Submit {
        tab: 4,
        text: "Count to five.".into(),
        images: Vec::new(),
    });
    let solo = run_until_finished(&h, &[4]).remove(0);
    assert!(!solo.0.is_empty());
    assert_eq!(both[1].0, solo.0, "tab 3 must answer as it does alone");

    // A follow-up in tab 1 prefills only its own tokens.
    let before = alone.2.reused_tokens + alone.2.prefilled_tokens + alone.2.generated_tokens;
    h.send(Command::Submit {
        tab: 1,
        text: "And three more?".into(),
        images: Vec::new(),
    });
    let follow = run_until_finished(&h, &[1]).remove(0);
    assert_eq!(follow.2.reuse, Reuse::ExactPrefix);
    assert_eq!(follow.2.reused_tokens, before);
    assert!(follow.2.prefilled_tokens < 20, "{:?}", follow.2);

    // Regenerate rewinds to the prompt and answers the same way (greedy).
    h.send(Command::Regenerate { tab: 1 });
    let again = run_until_finished(&h, &[1]).remove(0);
    assert_eq!(again.0, follow.0);
    // The session holds the answer past the prompt: a rewind to one token short of the prompt's
    // end, then that token again for fresh logits.
    assert_eq!(again.2.reuse, Reuse::Rewind);
    assert_eq!(again.2.prefilled_tokens, 1, "{:?}", again.2);
}

#[test]
fn stop_and_close_take_effect_within_a_step() {
    let h = engine();
    greedy(&h, 7, 400);
    h.send(Command::Submit {
        tab: 7,
        text: "Tell me a very long story.".into(),
        images: Vec::new(),
    });
    // Wait for the first token, then stop.
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Token { tab: 7, .. } => break,
            Event::Prefill { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    h.send(Command::Cancel { tab: 7 });
    let stopped = run_until_finished(&h, &[7]).remove(0);
    assert_eq!(stopped.1, TurnEnd::Cancelled);
    assert!(stopped.2.generated_tokens < 400);

    // A closed tab goes quiet, and the engine serves the others.
    h.send(Command::Submit {
        tab: 7,
        text: "Another long story, please.".into(),
        images: Vec::new(),
    });
    h.send(Command::CloseTab { tab: 7 });
    greedy(&h, 8, 3);
    h.send(Command::Submit {
        tab: 8,
        text: "Hi".into(),
        images: Vec::new(),
    });
    let mut finished = false;
    while !finished {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Finished { tab: 8, .. } => finished = true,
            Event::Token { tab: 8, .. } | Event::Prefill { tab: 8, .. } => {}
            // Tab 7 may have taken one step before the close arrived; nothing after.
            Event::Prefill { tab: 7, .. } | Event::Token { tab: 7, .. } => {}
            Event::TabState { .. } => {}
            Event::Committed { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // Submitting in a closed tab starts a fresh conversation there.
    greedy(&h, 7, 2);
    h.send(Command::Submit {
        tab: 7,
        text: "Hi".into(),
        images: Vec::new(),
    });
    let fresh = run_until_finished(&h, &[7]).remove(0);
    assert_eq!(fresh.2.reuse, Reuse::New);
}

#[test]
fn a_stop_string_ends_the_answer_and_never_shows() {
    let h = engine();
    greedy(&h, 1, 12);
    h.send(Command::Submit {
        tab: 1,
        text: "Write a short poem about the sea.".into(),
        images: Vec::new(),
    });
    let full = run_until_finished(&h, &[1]).remove(0).0;
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 8, "{full:?}");
    // A stop string from the middle of the answer, straddling tokens more often than not.
    let cut = chars.len() / 2;
    let stop: String = chars[cut..cut + 3].iter().collect();
    let before: String = chars[..cut].iter().collect();
    let shown = full
        .find(&stop)
        .map(|i| &full[..i])
        .unwrap_or(&before)
        .to_string();
    let settings = TabSettings {
        max_new_tokens: 12,
        stop: vec![stop.clone()],
        ..TabSettings::default()
    };
    configure(&h, 2, settings);
    h.send(Command::Submit {
        tab: 2,
        text: "Write a short poem about the sea.".into(),
        images: Vec::new(),
    });
    let (text, end, _) = run_until_finished(&h, &[2]).remove(0);
    assert_eq!(end, TurnEnd::StopString);
    assert_eq!(text, shown);
    assert!(!text.contains(&stop));
    // The tab goes on: the cut left the session holding exactly the shown answer (rewound, or
    // fed again from the turn's boundary snapshot where the sliding window had moved on), so the
    // next turn prefills only itself.
    h.send(Command::Submit {
        tab: 2,
        text: "Another one.".into(),
        images: Vec::new(),
    });
    let next = run_until_finished(&h, &[2]).remove(0);
    assert_eq!(next.2.reuse, Reuse::ExactPrefix, "{:?}", next.2);
    assert!(next.2.prefilled_tokens < 20, "{:?}", next.2);
}

#[test]
fn alternating_tabs_never_re_prefill_and_a_budget_of_one_swaps_through_ram() {
    for budget in [None, Some(1)] {
        let h = engine_with(EngineOptions {
            memory_budget: budget,
            ..EngineOptions::default()
        });
        let mut offloaded = 0;
        for tab in [1, 2] {
            greedy(&h, tab, 3);
            h.send(Command::Submit {
                tab,
                text: "Hello".into(),
                images: Vec::new(),
            });
            run_until_finished(&h, &[tab]);
        }
        for round in 0..10 {
            for tab in [1, 2] {
                h.send(Command::Submit {
                    tab,
                    text: format!("Round {round}."),
                    images: Vec::new(),
                });
                let (mut out, tiers) = run_collecting_tiers(&h, &[tab]);
                let stats = out.remove(0).2;
                assert_eq!(stats.reuse, Reuse::ExactPrefix, "{budget:?} round {round}");
                assert!(stats.prefilled_tokens < 16, "{budget:?}: {stats:?}");
                assert!(!tiers.iter().any(|(_, t)| *t == Tier::Cold));
                offloaded += tiers.iter().filter(|(_, t)| *t == Tier::Host).count();
            }
        }
        match budget {
            None => assert_eq!(offloaded, 0),
            Some(_) => assert!(offloaded >= 19, "only {offloaded} swaps through RAM"),
        }
    }
}

#[test]
fn a_failed_turn_is_reported_and_the_next_one_starts_over_from_intact_history() {
    let h = engine_with(EngineOptions {
        inject_failure: Some((3, 2)),
        ..EngineOptions::default()
    });
    // Reference: the same two turns in a tab without failures.
    greedy(&h, 4, 6);
    for text in ["Name a colour.", "And another one?"] {
        h.send(Command::Submit {
            tab: 4,
            text: text.into(),
            images: Vec::new(),
        });
    }
    // The second submit is refused while the first runs; wait, then send it again.
    let mut reference = Vec::new();
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Failed { tab: 4, error } => assert!(error.contains("still running"), "{error}"),
            Event::Finished { tab: 4, .. } => break,
            _ => {}
        }
    }
    h.send(Command::Submit {
        tab: 4,
        text: "And another one?".into(),
        images: Vec::new(),
    });
    reference.push(run_until_finished(&h, &[4]).remove(0));

    // Tab 3: the first turn's third forward step fails (inside the prefill of the first turn).
    greedy(&h, 3, 6);
    h.send(Command::Submit {
        tab: 3,
        text: "Name a colour.".into(),
        images: Vec::new(),
    });
    let error = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Failed { tab: 3, error } => break error,
            Event::Finished { tab: 3, .. } => panic!("the injected failure did not fire"),
            _ => {}
        }
    };
    assert!(error.contains("injected failure"), "{error}");
    // Nothing of the failed turn is kept: the same two turns now give the reference answer.
    h.send(Command::Submit {
        tab: 3,
        text: "Name a colour.".into(),
        images: Vec::new(),
    });
    let first = run_until_finished(&h, &[3]).remove(0);
    assert_eq!(first.2.reuse, Reuse::Dirty);
    h.send(Command::Submit {
        tab: 3,
        text: "And another one?".into(),
        images: Vec::new(),
    });
    let second = run_until_finished(&h, &[3]).remove(0);
    assert_eq!(second.2.reuse, Reuse::ExactPrefix);
    assert_eq!(second.0, reference[0].0);
    assert_eq!(second.2.reused_tokens, reference[0].2.reused_tokens);

    // A tab's own context limit: over the model's maximum it is refused; a small one refuses a
    // turn that does not fit, and changes nothing.
    let context = |tokens| TabSettings {
        context: Some(tokens),
        ..TabSettings::default()
    };
    configure(&h, 9, context(1 << 20));
    match h
        .events
        .recv_timeout(Duration::from_secs(10))
        .expect("event")
    {
        Event::Notice { tab: 9, text } => assert!(text.contains("allowed 1 to 32768"), "{text}"),
        other => panic!("unexpected {other:?}"),
    }
    configure(&h, 9, context(8));
    h.send(Command::Submit {
        tab: 9,
        text: "A message longer than eight tokens, surely.".into(),
        images: Vec::new(),
    });
    match h
        .events
        .recv_timeout(Duration::from_secs(10))
        .expect("event")
    {
        Event::Failed { tab: 9, error } => {
            assert!(error.contains("context length exceeded"), "{error}")
        }
        other => panic!("unexpected {other:?}"),
    }

    // Gemma 3 has no thinking mode: asking for it says so (a notice: nothing failed) and changes
    // nothing.
    let thinking = TabSettings {
        thinking: true,
        ..TabSettings::default()
    };
    configure(&h, 3, thinking);
    match h
        .events
        .recv_timeout(Duration::from_secs(10))
        .expect("event")
    {
        Event::Notice { tab: 3, text } => assert!(text.contains("no thinking mode"), "{text}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn stop_during_a_long_prefill_lands_within_one_chunk() {
    let h = engine();
    greedy(&h, 1, 4);
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(120);
    h.send(Command::Submit {
        tab: 1,
        text: long,
        images: Vec::new(),
    });
    // The first chunk's progress: the prefill is under way.
    match h
        .events
        .recv_timeout(Duration::from_secs(120))
        .expect("event")
    {
        Event::Prefill {
            tab: 1,
            done,
            total,
            ..
        } => {
            assert!(total > 1000, "a long prompt: {total}");
            eprintln!("prompt of {total} tokens, first chunk {done}");
            assert!(done < total);
        }
        other => panic!("unexpected {other:?}"),
    }
    h.send(Command::Cancel { tab: 1 });
    let mut chunks_after_stop = 0;
    let (end, stats) = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Prefill { tab: 1, .. } => chunks_after_stop += 1,
            Event::Finished { tab: 1, end, stats } => break (end, stats),
            Event::Committed { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(end, TurnEnd::Cancelled);
    assert!(
        chunks_after_stop <= 1,
        "{chunks_after_stop} chunks ran after the stop"
    );
    // (A tab alone prefills 512 tokens a step: the stop lands within the step under way, or the
    // one after it.)
    assert!(stats.prefilled_tokens <= 1024, "{stats:?}");
    assert_eq!(stats.generated_tokens, 0);
    // The partial prefill is kept and reused: resending the same text prefills only the rest.
    h.send(Command::Submit {
        tab: 1,
        text: "The quick brown fox jumps over the lazy dog. ".repeat(120),
        images: Vec::new(),
    });
    let again = run_until_finished(&h, &[1]).remove(0);
    assert_eq!(again.2.reuse, Reuse::ExactPrefix);
    assert_eq!(again.2.reused_tokens, stats.prefilled_tokens);
}

#[test]
fn a_warm_restart_continues_a_long_chat_without_a_prefill() {
    let kv = tempfile::tempdir().expect("tmp");
    let convos = tempfile::tempdir().expect("tmp");
    let options = EngineOptions {
        kv_dir: Some(kv.path().to_path_buf()),
        convo_dir: Some(convos.path().to_path_buf()),
        kv_disk_bytes: 1 << 30,
        ..EngineOptions::default()
    };
    let attach = |h: &EngineHandle, tab: TabId| {
        h.send(Command::Attach {
            tab,
            chat: "long-chat".into(),
            history: Vec::new(),
            legacy: None,
        });
    };
    let story = "The old lighthouse keeper climbed the stairs every evening to light the lamp. ";
    let tokens = {
        let h = engine_with(options.clone());
        attach(&h, 1);
        greedy(&h, 1, 4);
        h.send(Command::Submit {
            tab: 1,
            text: story.repeat(72),
            images: Vec::new(),
        });
        let mut committed = None;
        loop {
            match h
                .events
                .recv_timeout(Duration::from_secs(120))
                .expect("event")
            {
                Event::Committed { tab: 1, tokens } => committed = Some(tokens),
                Event::Finished { .. } => break,
                Event::Failed { error, .. } => panic!("{error}"),
                _ => {}
            }
        }
        committed.expect("the turn was committed before it finished")
        // Dropping the engine shuts it down, which saves the warm tab.
    };
    assert!(tokens > 1000, "a chat of over 1,000 tokens: {tokens}");
    let saved = std::fs::read_dir(kv.path()).expect("dir").count();
    assert_eq!(saved, 1, "one snapshot");

    // After a restart the engine finds the chat's conversation under its name: the UI sends no
    // ids, only the chat's name.
    let restore = |h: &EngineHandle, tab: TabId| {
        attach(h, tab);
        greedy(h, tab, 4);
        h.send(Command::Submit {
            tab,
            text: "And then?".into(),
            images: Vec::new(),
        });
        run_until_finished(h, &[tab]).remove(0)
    };
    let h = engine_with(options.clone());
    let (text, _, stats) = restore(&h, 5);
    eprintln!("chat of {tokens} tokens, after the restart: {stats:?}");
    assert_eq!(stats.reuse, Reuse::ExactPrefix, "{stats:?}");
    // The whole conversation was resident (it ends with the answer; the template's closing
    // comes with the next turn): only the new turn is prefilled.
    assert_eq!(stats.reused_tokens, tokens, "{stats:?}");
    assert!(stats.prefilled_tokens < 16, "{stats:?}");
    drop(h);

    // The same turn with the snapshot gone prefills the history once, and answers the same.
    let cold = EngineOptions {
        kv_dir: None,
        ..options
    };
    let h = engine_with(cold);
    let (cold_text, _, cold_stats) = restore(&h, 5);
    assert_eq!(cold_stats.reuse, Reuse::Restored);
    assert_eq!(cold_stats.reused_tokens, 0);
    assert_eq!(cold_text, text, "warm and cold restarts answer alike");
}

#[test]
fn a_context_length_over_the_models_maximum_is_refused() {
    let h = start(EngineOptions {
        context_length: Some(1 << 20),
        context_strict: true,
        ..EngineOptions::default()
    });
    match first_after_loading(&h) {
        Event::LoadFailed { error } => {
            assert!(error.contains("model.context_length = 1048576"), "{error}");
            assert!(error.contains("maximum (32768)"), "{error}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A bug on the engine thread (a panic) reaches the UI as an event instead of silence: the UI
/// can say so and stay usable.
#[test]
fn a_panic_on_the_engine_thread_becomes_an_event() {
    let h = spawn(
        EngineOptions::default(),
        |_progress| -> gemma_model::Result<_> {
            panic!("planted bug");
        },
    );
    match h
        .events
        .recv_timeout(Duration::from_secs(30))
        .expect("an event, not silence")
    {
        Event::EngineStopped { error } => {
            assert!(
                error.contains("planted bug") && error.contains("restart"),
                "{error}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}
