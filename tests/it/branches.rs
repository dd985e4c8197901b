//! Editing an earlier message and switching versions through the engine, on the tiny Gemma 4
//! fixtures (sliding window 8, so every rewind here goes through a turn-boundary snapshot): the
//! shared history keeps its ids and is never prefilled again (`rewind`, reused ≥ the shared
//! prefix, prefilled = the rest), and the edited conversation is exactly the one a fresh tab
//! gets when sent the edited messages (greedy: the same ids, the same answer). The logits after
//! such a rewind equal a cold run: `tests/sessions.rs`.

use std::path::Path;
use std::time::Duration;

use gemma_engine::EngineHandle;
use gemma_engine::protocol::{Command, Event, Exchange, Reuse, TabId, TurnStats};

use crate::common::chat::{chat, engine, fixture, open, store};

fn next(h: &EngineHandle) -> Event {
    h.events
        .recv_timeout(Duration::from_secs(120))
        .expect("event")
}

/// Sends `text` and waits for the turn: its answer's text and stats.
fn turn(h: &EngineHandle, tab: TabId, text: &str) -> (String, TurnStats) {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images: Vec::new(),
    });
    let mut answer = String::new();
    loop {
        match next(h) {
            Event::Token { tab: t, text } if t == tab => answer.push_str(&text),
            Event::Finished { tab: t, stats, .. } if t == tab => return (answer, stats),
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
}

/// Moves the tab to `history` and returns the engine's (tokens, common) answer.
fn set_path(h: &EngineHandle, tab: TabId, history: &[Exchange]) -> (usize, usize) {
    h.send(Command::SetPath {
        tab,
        history: history.to_vec(),
    });
    loop {
        match next(h) {
            Event::Rebased {
                tab: t,
                tokens,
                common,
            } if t == tab => return (tokens, common),
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
}

fn ids(dir: &Path, tab: TabId) -> Vec<u32> {
    store(dir).load(&chat(tab)).expect("saved").ids
}

fn ex(user: &str, answer: &str) -> Exchange {
    Exchange {
        calls: Vec::new(),
        media: Vec::new(),
        user: user.into(),
        answer: answer.into(),
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[test]
fn an_edit_rewinds_to_the_shared_prefix_and_equals_a_fresh_tab() {
    for name in ["gemma4_e2b_style", "gemma4_moe"] {
        let dir = fixture(name, None);
        let d = dir.path();
        let h = engine(d);
        open(&h, 1);
        let (a1, _) = turn(&h, 1, "Hi there");
        let one = ids(d, 1);
        let (a2, _) = turn(&h, 1, "Tell me a joke.");
        let (_, _) = turn(&h, 1, "Why?");
        let three = ids(d, 1);

        // Edit the second message: the path up to its parent, then the new text.
        let (tokens, common) = set_path(&h, 1, &[ex("Hi there", &a1)]);
        assert_eq!(tokens, one.len(), "{name}: the first exchange as it was");
        assert_eq!(common, one.len(), "{name}: all of it is in the cache");
        let (edited, stats) = turn(&h, 1, "Why not?");
        let now = ids(d, 1);
        let prompt = now.len() - stats.generated_tokens;
        assert_eq!(&now[..one.len()], &one[..], "{name}: shared ids kept");
        assert_eq!(stats.reuse, Reuse::Rewind, "{name}");
        let lcp = common_prefix(&three, &now);
        assert!(
            stats.reused_tokens >= one.len() && stats.reused_tokens <= lcp,
            "{name}: reused {} of a shared {} (common prefix {lcp})",
            stats.reused_tokens,
            one.len()
        );
        assert_eq!(
            stats.prefilled_tokens,
            prompt - stats.reused_tokens,
            "{name}"
        );
        println!(
            "{name}: edit of message 2 of 3: reused {} (shared history {}, common prefix \
             {lcp}), prefilled {} of a {prompt}-token prompt",
            stats.reused_tokens,
            one.len(),
            stats.prefilled_tokens
        );

        // A fresh tab sent the edited conversation holds the same ids and answers the same.
        open(&h, 2);
        let (b1, _) = turn(&h, 2, "Hi there");
        assert_eq!(b1, a1, "{name}");
        let (b2, fresh) = turn(&h, 2, "Why not?");
        assert_eq!(b2, edited, "{name}: the edited answer is a cold run's");
        assert_eq!(
            ids(d, 2),
            now,
            "{name}: the edited conversation is a cold run's"
        );
        assert_eq!(fresh.reuse, Reuse::ExactPrefix);

        // Back to the first version of message 2: only what differs is prefilled.
        let (tokens, common) = set_path(&h, 1, &[ex("Hi there", &a1), ex("Tell me a joke.", &a2)]);
        assert!(
            common >= one.len() && common < tokens,
            "{name}: {common} of {tokens}"
        );
        let (_, stats) = turn(&h, 1, "Go on.");
        assert_eq!(stats.reuse, Reuse::Rewind, "{name}");
        assert!(
            stats.reused_tokens >= one.len() && stats.reused_tokens <= common,
            "{name}: reused {} (common {common})",
            stats.reused_tokens
        );
        let back = ids(d, 1);
        assert_eq!(&back[..one.len()], &one[..], "{name}");

        // A copy into a new tab starts warm from the copied session.
        h.send(Command::Attach {
            tab: 3,
            chat: chat(3),
            history: Vec::new(),
            legacy: None,
        });
        h.send(Command::Fork {
            tab: 3,
            from: 2,
            history: vec![ex("Hi there", &a1)],
        });
        open(&h, 3);
        let (_, stats) = turn(&h, 3, "Why not?");
        assert_eq!(
            stats.reuse,
            Reuse::Rewind,
            "{name}: the fork shares tab 2's cache"
        );
        assert!(stats.reused_tokens >= one.len(), "{name}");
        assert_eq!(ids(d, 3), now, "{name}");
    }
}
