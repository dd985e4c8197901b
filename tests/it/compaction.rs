//! A tab driven past its context on the tiny Gemma 4 fixture (its whole 512-token context):
//! `compact` summarizes the older exchanges in a turn that reuses the resident prefix, moves the
//! tab to the summary and the newest exchanges, and answers the message that did not fit; the
//! next turn is warm. `slide` keeps the newest exchanges; `/compact` does it on demand; `stop`
//! still ends at the limit.

use std::time::Duration;

use gemma_engine::EngineHandle;
use gemma_engine::protocol::{
    Command, Compaction, Event, Overflow, OverflowMode, Reuse, SUMMARY_LEAD, TabId, TabSettings,
    TurnEnd, TurnStats,
};
use gemma_model::tokenizer::Tokenizer;

use crate::common::chat::{chat, configure, engine, fixture, open, short_answers, store};

const CONTEXT: usize = 512;

fn next(h: &EngineHandle) -> Event {
    h.events
        .recv_timeout(Duration::from_secs(120))
        .expect("event")
}

/// What one message brought: the compaction before its turn, if any, and how the turn ended.
struct Outcome {
    compacted: Option<Compaction>,
    end: TurnEnd,
    stats: TurnStats,
    tokens: usize,
    notices: Vec<String>,
}

fn send(h: &EngineHandle, tab: TabId, text: &str) -> Outcome {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images: Vec::new(),
    });
    let (mut compacted, mut tokens, mut notices) = (None, 0, Vec::new());
    loop {
        match next(h) {
            Event::Notice { tab: t, text } if t == tab => notices.push(text),
            Event::Compacted { tab: t, report } if t == tab => {
                assert!(compacted.is_none(), "one compaction per message");
                compacted = Some(report);
            }
            Event::Committed { tab: t, tokens: n } if t == tab => tokens = n,
            Event::Finished { tab: t, end, stats } if t == tab => {
                return Outcome {
                    compacted,
                    end,
                    stats,
                    tokens,
                    notices,
                };
            }
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
}

fn set_up(h: &EngineHandle, tab: TabId, mode: OverflowMode) {
    set_up_with(h, tab, mode, CONTEXT, "Summarize our talk.");
}

fn set_up_with(h: &EngineHandle, tab: TabId, mode: OverflowMode, tokens: usize, prompt: &str) {
    open(h, tab);
    let overflow = Overflow {
        mode,
        at: 0.9,
        prompt: prompt.into(),
    };
    let settings = TabSettings {
        context: Some(tokens),
        overflow,
        ..short_answers()
    };
    configure(h, tab, settings);
}

/// What `/compact` in `tab` brought: the report, or the reason it was refused.
fn compact_now(h: &EngineHandle, tab: TabId) -> Result<Compaction, String> {
    h.send(Command::Compact { tab });
    loop {
        match next(h) {
            Event::Compacted { tab: t, report } if t == tab => return Ok(report),
            Event::Failed { tab: t, error } if t == tab => return Err(error),
            _ => {}
        }
    }
}

/// A message of a few dozen tokens that names `i`.
fn message(i: usize) -> String {
    format!("Message {i}: the river and the hill of {i}.")
}

/// Sends messages until one is compacted (at most `limit`): its number and outcome.
fn drive(h: &EngineHandle, tab: TabId, limit: usize) -> (usize, Outcome) {
    for i in 1..=limit {
        let o = send(h, tab, &message(i));
        assert_ne!(
            o.end,
            TurnEnd::ContextFull,
            "message {i} ran out of context"
        );
        if o.compacted.is_some() {
            return (i, o);
        }
        assert!(
            o.tokens as f64 <= 0.9 * CONTEXT as f64 + 8.0,
            "{} tokens",
            o.tokens
        );
    }
    panic!("no compaction in {limit} messages");
}

fn text_of(dir: &std::path::Path, tab: TabId) -> String {
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json")).expect("tokenizer");
    let ids = store(dir).load(&chat(tab)).expect("saved").ids;
    tok.decode(&ids, false).expect("decode")
}

#[test]
fn a_full_context_compacts_warm_and_the_conversation_goes_on() {
    let dir = fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    set_up(&h, 1, OverflowMode::Compact);
    let (n, o) = drive(&h, 1, 30);
    let r = o.compacted.expect("compacted");
    assert!(n > 2, "compacted at message {n}");
    assert!(r.resumes);
    assert!(r.after < r.before, "{r:?}");
    assert_eq!(r.dropped + r.summarized + r.kept, n - 1, "{r:?}");
    let text = text_of(dir.path(), 1);
    match r.mode {
        OverflowMode::Compact => {
            assert!(r.summarized >= 1);
            // The summary's turn prefilled only the request: the exchanges it covers were
            // resident.
            assert_eq!(r.reused, r.before, "{r:?}");
            assert!(r.prefilled < 60, "{r:?}");
            // The new path opens with the short question the summary answers, not the request.
            assert_eq!(r.prompt, SUMMARY_LEAD);
            assert!(text.contains(SUMMARY_LEAD), "{text}");
            assert!(!text.contains("Summarize our talk."), "{text}");
        }
        // The random model may end its summary at once: then the oldest exchanges go.
        OverflowMode::Slide => assert!(r.summary.is_none() && r.dropped >= 1),
        OverflowMode::Stop => panic!("stop never compacts"),
    }
    // The message that did not fit was answered on the new path, after the kept exchanges.
    assert!(text.contains(&message(n)), "{text}");
    assert!(!text.contains(&message(1)), "{text}");
    assert!(o.tokens < CONTEXT);
    // The new path shares only the header with what was resident: rewound there, or (the
    // sliding window has moved past it) prefilled whole, and the turn says which.
    assert!(
        matches!(o.stats.reuse, Reuse::Rewind | Reuse::Mismatch),
        "{:?}",
        o.stats
    );
    // The next turn is warm.
    let o = send(&h, 1, "And then?");
    assert!(o.compacted.is_none());
    assert_eq!(o.stats.reuse, Reuse::ExactPrefix, "{:?}", o.stats);
}

#[test]
fn a_slide_keeps_the_newest_exchanges() {
    let dir = fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    set_up(&h, 1, OverflowMode::Slide);
    let (n, o) = drive(&h, 1, 30);
    let r = o.compacted.expect("slid");
    assert_eq!(r.mode, OverflowMode::Slide);
    assert!(
        r.summary.is_none() && r.summarized == 0 && r.dropped >= 1,
        "{r:?}"
    );
    assert_eq!(r.dropped + r.kept, n - 1);
    let text = text_of(dir.path(), 1);
    for i in 1..n {
        assert_eq!(
            text.contains(&message(i)),
            i > r.dropped,
            "message {i}: {text}"
        );
    }
    assert!(text.contains(&message(n)));
}

#[test]
fn compact_on_demand_and_stop_at_the_limit() {
    let dir = fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    set_up(&h, 1, OverflowMode::Stop);
    // Nothing to compact yet.
    h.send(Command::Compact { tab: 1 });
    loop {
        match next(&h) {
            Event::Failed { tab: 1, error } => {
                assert!(error.contains("nothing to compact"), "{error}");
                break;
            }
            Event::Compacted { .. } => panic!("nothing to compact"),
            _ => {}
        }
    }
    // Two short exchanges: a summary would be no shorter, and the conversation stays as it is.
    for i in 1..=2 {
        send(&h, 1, &message(i));
    }
    let error = compact_now(&h, 1).expect_err("no shorter");
    assert!(
        error.contains("no shorter") || error.contains("nothing worth compacting"),
        "{error}"
    );
    assert!(!text_of(dir.path(), 1).contains(SUMMARY_LEAD));
    // Seven: the summary replaces the older ones, and the conversation gets shorter.
    for i in 3..=7 {
        send(&h, 1, &message(i));
    }
    let r = compact_now(&h, 1).expect("compacted");
    assert!(!r.resumes);
    assert!(r.after < r.before, "{r:?}");
    assert_eq!(r.summarized + r.dropped + r.kept, 7, "{r:?}");
    let text = text_of(dir.path(), 1);
    assert!(!text.contains("Summarize our talk."), "{text}");
    let o = send(&h, 1, "Go on.");
    assert!(o.compacted.is_none());
    // Under `stop`, a conversation that outgrows the context is never compacted: the turn that
    // does not fit is refused.
    let refused = (8..40).find_map(|i| {
        h.send(Command::Submit {
            tab: 1,
            text: message(i),
            images: Vec::new(),
        });
        loop {
            match next(&h) {
                Event::Compacted { .. } => panic!("stop does not compact"),
                Event::Finished { tab: 1, .. } => return None,
                Event::Failed { tab: 1, error } => return Some(error),
                _ => {}
            }
        }
    });
    let error = refused.expect("a turn is refused once the context is full");
    assert!(error.contains("context"), "{error}");
}

/// A context too small for a summary's turn (a long request): the turn that overflows slides
/// instead and says why, every later turn goes on, and `/compact` names the reason.
#[test]
fn a_context_too_small_for_a_summary_slides_and_says_why() {
    let dir = fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    let request =
        "Summarize everything we said so far, in order, with every name and number. ".repeat(12);
    set_up_with(&h, 1, OverflowMode::Compact, 200, &request);
    send(&h, 1, &message(1));
    let error = compact_now(&h, 1).expect_err("no room for a summary");
    assert!(error.contains("does not fit the context of 200"), "{error}");
    assert!(error.contains("slide"), "{error}");
    let mut slid = 0;
    for i in 2..=12 {
        let o = send(&h, 1, &message(i));
        assert_ne!(o.end, TurnEnd::ContextFull, "message {i}");
        if let Some(r) = &o.compacted {
            assert_eq!(r.mode, OverflowMode::Slide, "{r:?}");
            assert!(
                o.notices.iter().any(|n| n.contains("does not fit")),
                "{:?}",
                o.notices
            );
            slid += 1;
        }
    }
    assert!(slid >= 1, "the conversation outgrew 200 tokens and slid");
}
