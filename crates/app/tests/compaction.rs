//! A tab whose conversation the engine compacts (`Event::Compacted`), through the real `App`:
//! the message that did not fit moves to a new version of the conversation that starts with the
//! summary (marked), the full one stays a version away, the answer streams in after it, and the
//! history sent to the engine later is the new path's. `/compact` sends the command and ends
//! its wait with the report.

mod common;

use common::{draw, key, ready_app, type_text};
use crossterm::event::KeyCode;
use gemma_app::app::persist::exchanges;
use gemma_app::app::{App, Msg};
use gemma_protocol::{Command, Compaction, Event, OverflowMode, Reuse, TabId, TurnEnd, TurnStats};

fn stats() -> TurnStats {
    TurnStats {
        reuse: Reuse::ExactPrefix,
        reused_tokens: 300,
        prefilled_tokens: 20,
        prefill_tok_s: 200.0,
        decode_tok_s: 12.5,
        ttft_s: 0.1,
        generated_tokens: 3,
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: 0,
        speculation: None,
    }
}

fn send(app: &mut App, text: &str) -> TabId {
    type_text(app, text);
    match app.update(key(KeyCode::Enter)).as_slice() {
        [Command::Submit { tab, .. }] => *tab,
        other => panic!("expected a submit, got {other:?}"),
    }
}

fn answer(app: &mut App, tab: TabId, text: &str) {
    app.update(Msg::Engine(Event::Token {
        tab,
        text: text.into(),
    }));
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(106),
        stats: stats(),
    }));
}

fn report(resumes: bool) -> Compaction {
    Compaction {
        mode: OverflowMode::Compact,
        prompt: "Summarize our conversation.".into(),
        summary: Some("Cats were named: Tom and Kit.".into()),
        summarized: 2,
        dropped: 0,
        kept: 1,
        before: 7_350,
        after: 1_210,
        reused: 7_350,
        prefilled: 24,
        resumes,
    }
}

#[test]
fn a_compacted_conversation_goes_on_as_a_new_version() {
    let mut app = ready_app();
    for (q, a) in [
        ("Name a cat.", "Tom."),
        ("Another?", "Kit."),
        ("A dog?", "Rex."),
    ] {
        let tab = send(&mut app, q);
        answer(&mut app, tab, a);
    }
    let tab = send(&mut app, "And a bird?");
    app.update(Msg::Engine(Event::Compacted {
        tab,
        report: report(true),
    }));
    answer(&mut app, tab, "Tweety.");
    insta::assert_snapshot!("compacted", draw(&mut app, 100, 22).backend());
    let t = app.tab().expect("tab");
    let ex = exchanges(&t.messages);
    let users: Vec<&str> = ex.iter().map(|e| e.user.as_str()).collect();
    assert_eq!(
        users,
        ["Summarize our conversation.", "A dog?", "And a bird?"]
    );
    assert_eq!(ex[2].answer, "Tweety.");
    // The full conversation is the other version of the first message.
    assert_eq!(t.messages[0].versions, Some((2, 2)));
}

#[test]
fn compact_on_demand_waits_for_the_report() {
    let mut app = ready_app();
    type_text(&mut app, "/compact");
    app.update(key(KeyCode::Enter));
    assert!(
        app.flash
            .as_deref()
            .unwrap_or("")
            .contains("nothing to compact")
    );
    let tab = send(&mut app, "Name a cat.");
    answer(&mut app, tab, "Tom.");
    let tab = send(&mut app, "Another?");
    answer(&mut app, tab, "Kit.");
    type_text(&mut app, "/compact");
    let cmds = app.update(key(KeyCode::Enter));
    assert_eq!(cmds, [Command::Compact { tab }]);
    assert!(app.tab().expect("tab").phase.busy());
    let mut r = report(false);
    r.summarized = 1;
    app.update(Msg::Engine(Event::Compacted { tab, report: r }));
    let t = app.tab().expect("tab");
    assert!(!t.phase.busy());
    let users: Vec<String> = exchanges(&t.messages).into_iter().map(|e| e.user).collect();
    assert_eq!(users, ["Summarize our conversation.", "Another?"]);
}
