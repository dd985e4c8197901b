//! The thinking level in the app: F3 and `/think` set it per tab and tell the engine its budget,
//! the input's title shows it, the answer's footer counts the thought against the budget (live,
//! then from the stats), the context meter shows the thought's share, and the chat file keeps
//! the level (a file of an earlier release, with `thinking: true` only, reads as medium).

mod common;

use std::time::Instant;

use common::{key, type_text};
use crossterm::event::KeyCode;
use gemma_app::app::{App, Msg};
use gemma_app::chats::SavedChat;
use gemma_app::config::Thinking;
use gemma_app::config::sampling::SamplingLayer;
use gemma_app::ui::{self, view::View};
use gemma_protocol::{Command, Event, Reuse, TurnEnd, TurnStats};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// An app whose model thinks, loaded.
fn thinking_app() -> App {
    let (mut app, _) = common::app(SamplingLayer::default());
    app.update(Msg::Engine(Event::Ready {
        model: "gemma4".into(),
        context_length: 8192,
        thinking: true,
        tool_calls: true,
        generation: SamplingLayer::default(),
    }));
    app
}

/// The screen at `w` x `h`, the clock stopped at `now` (so that tok/s is stable).
fn draw(app: &mut App, w: u16, h: u16, now: Instant) -> Terminal<TestBackend> {
    app.update(Msg::Resize(w, h));
    app.update(Msg::Tick(now));
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    let mut measured = None;
    t.draw(|f| measured = ui::render(f, app, &mut View::default()))
        .expect("draw");
    if let Some(m) = measured {
        app.measured(m);
    }
    t
}

/// The thinking the last settings among `cmds` give: (on, budget).
fn set_thinking(cmds: &[Command]) -> Option<(bool, Option<usize>)> {
    cmds.iter().rev().find_map(|c| match c {
        Command::Configure { settings, .. } => Some((
            settings.thinking,
            settings.thought_budget.filter(|_| settings.thinking),
        )),
        _ => None,
    })
}

fn think(app: &mut App, arg: &str) -> Vec<Command> {
    type_text(app, &format!("/think {arg}"));
    app.update(key(KeyCode::Enter))
}

#[test]
fn f3_and_think_set_the_level_and_its_budget() {
    let mut app = thinking_app();
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(set_thinking(&app.update(key(KeyCode::F(3)))).expect("sent"));
    }
    assert_eq!(
        seen,
        [
            (true, Some(512)),
            (true, Some(2048)),
            (true, Some(8192)),
            (true, None),
            (false, None)
        ]
    );
    assert_eq!(
        set_thinking(&think(&mut app, "1500")),
        Some((true, Some(1500)))
    );
    assert_eq!(
        app.tab().expect("tab").choices.thinking,
        Thinking::Tokens(1500)
    );
    assert_eq!(
        set_thinking(&think(&mut app, "on")),
        Some((true, Some(2048)))
    );
    assert_eq!(set_thinking(&think(&mut app, "off")), Some((false, None)));
    let cmds = think(&mut app, "lots");
    assert_eq!(set_thinking(&cmds), None);
    assert!(
        app.flash.as_deref().is_some_and(|f| f.contains("/think")),
        "{:?}",
        app.flash
    );
}

#[test]
fn the_footer_counts_the_thought_against_the_budget() {
    let mut app = thinking_app();
    think(&mut app, "medium");
    let now = Instant::now();
    app.update(Msg::Tick(now));
    type_text(&mut app, "Is 91 prime?");
    let tab = match app.update(key(KeyCode::Enter)).as_slice() {
        [Command::Submit { tab, .. }] => *tab,
        other => panic!("{other:?}"),
    };
    for (text, tokens) in [("91 is odd.\n", 600), ("Try 7: 7 x 13 = 91.\n", 1024)] {
        app.update(Msg::Engine(Event::Thought {
            tab,
            text: text.into(),
            tokens,
        }));
    }
    insta::assert_snapshot!(
        "thought_count_streaming",
        draw(&mut app, 80, 12, now).backend()
    );
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "No: 91 = 7 x 13.".into(),
    }));
    let stats = TurnStats {
        reuse: Reuse::New,
        reused_tokens: 0,
        prefilled_tokens: 20,
        prefill_tok_s: 200.0,
        decode_tok_s: 12.5,
        ttft_s: 0.1,
        generated_tokens: 1992,
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: 1984,
        speculation: None,
    };
    app.update(Msg::Engine(Event::Committed { tab, tokens: 28 }));
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(106),
        stats,
    }));
    let t = app.tab().expect("tab");
    let footer = t
        .messages
        .last()
        .and_then(|m| m.footer.clone())
        .expect("footer");
    assert!(footer.ends_with("· thought 1,984/2,048"), "{footer}");
    insta::assert_snapshot!(
        "thought_count_finished",
        draw(&mut app, 80, 12, now).backend()
    );
}

#[test]
fn the_chat_file_keeps_the_level_and_reads_the_old_switch() {
    let mut app = thinking_app();
    think(&mut app, "high");
    type_text(&mut app, "Hi");
    app.update(key(KeyCode::Enter));
    let chat = app.saved(app.active);
    assert!(chat.thinking, "earlier releases read it as on");
    assert_eq!(chat.thinking_level.as_deref(), Some("high"));
    let json = serde_json::to_string(&chat).expect("writes");
    let back: SavedChat = serde_json::from_str(&json).expect("reads");
    assert_eq!(back.level(), Thinking::High);
    let old = r#"{"version":4,"order":0,"title":"t","model":"gemma4","thinking":true,
        "messages":[{"id":1,"role":"user","text":"Hi"}]}"#;
    let old: SavedChat = serde_json::from_str(old).expect("an earlier file reads");
    assert_eq!(old.level(), Thinking::Medium);
    let mut app = thinking_app();
    let cmds = app.restore(vec![("chat-old".into(), old)], Vec::new());
    assert_eq!(set_thinking(&cmds), Some((true, Some(2048))), "{cmds:?}");
    assert_eq!(app.tab().expect("tab").choices.thinking, Thinking::Medium);
}
