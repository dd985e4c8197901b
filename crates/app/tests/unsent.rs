//! A sent message is on disk before its turn runs: killed while the turn waits (a tool's
//! approval, a picture's encoding), gemma-chat gives the message back at the next start, in the
//! editor, and the engine is attached to the conversation as it was before it (probe F1).

mod common;

use common::{key, type_text};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use gemma_app::app::{App, Msg};
use gemma_app::chats::{SaveJob, SavedChat};
use gemma_app::config::sampling::SamplingLayer;
use gemma_protocol::{Command, Event, Exchange, Reuse, TabId, TurnEnd, TurnStats};

fn ready(app: &mut App) {
    app.update(Msg::Engine(Event::Ready {
        model: "gemma3_text".into(),
        context_length: 8192,
        thinking: false,
        tool_calls: false,
        generation: SamplingLayer::default(),
    }));
}

fn send(app: &mut App, text: &str) -> TabId {
    type_text(app, text);
    let cmds = app.update(key(KeyCode::Enter));
    match cmds.as_slice() {
        [.., Command::Submit { tab, .. }] => *tab,
        other => panic!("expected a submit, got {other:?}"),
    }
}

fn answer(app: &mut App, tab: TabId, text: &str) {
    app.update(Msg::Engine(Event::Token {
        tab,
        text: text.into(),
    }));
    let stats = TurnStats {
        reuse: Reuse::New,
        reused_tokens: 0,
        prefilled_tokens: 9,
        prefill_tok_s: 100.0,
        decode_tok_s: 10.0,
        ttft_s: 0.1,
        generated_tokens: 2,
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: 0,
        speculation: None,
    };
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(106),
        stats,
    }));
}

/// The last chat file written for the active tab: what a kill -9 leaves on disk.
fn on_disk(app: &mut App) -> (String, SavedChat) {
    let uid = app.tab().expect("tab").uid.clone();
    let last = app
        .take_saves()
        .into_iter()
        .rev()
        .find_map(|j| match j {
            SaveJob::Write(u, chat) if u == uid => Some(*chat),
            _ => None,
        })
        .expect("the tab was written");
    // Through JSON, as the file is read back.
    let json = serde_json::to_string(&last).expect("json");
    (uid, serde_json::from_str(&json).expect("reads"))
}

fn restart(uid: String, chat: SavedChat) -> (App, Vec<Command>) {
    let (mut app, _) = common::app(SamplingLayer::default());
    let cmds = app.restore(vec![(uid, chat)], Vec::new());
    (app, cmds)
}

fn history(cmds: &[Command]) -> Vec<Exchange> {
    // The last: a restored tab is opened (attached empty) first.
    cmds.iter()
        .rev()
        .find_map(|c| match c {
            Command::Attach { history, .. } => Some(history.clone()),
            _ => None,
        })
        .expect("an attach")
}

#[test]
fn a_message_killed_mid_turn_comes_back_in_the_editor() {
    let (mut app, _) = common::app(SamplingLayer::default());
    ready(&mut app);
    let tab = send(&mut app, "first question");
    answer(&mut app, tab, "first answer");
    app.take_saves();
    // The second turn starts and never ends (it waits for a tool's approval; kill -9).
    send(&mut app, "second question pending");
    let (uid, chat) = on_disk(&mut app);
    assert_eq!(chat.messages.len(), 2, "the path as before the turn");
    let unsent = chat.unsent.as_ref().expect("the message is on disk");
    assert_eq!(unsent.message.text, "second question pending");
    assert_eq!(unsent.edits, None);

    let (app, cmds) = restart(uid, chat);
    let t = app.tab().expect("tab");
    assert_eq!(t.editor.text(), "second question pending");
    assert_eq!(t.editing, None);
    assert!(
        t.messages
            .last()
            .is_some_and(|m| m.text.contains("back in the editor")),
        "the tab says where it went: {:?}",
        t.messages.last()
    );
    // The engine's conversation is the one before the lost turn.
    assert_eq!(
        history(&cmds),
        vec![Exchange {
            calls: Vec::new(),
            media: Vec::new(),
            user: "first question".into(),
            answer: "first answer".into()
        }]
    );
}

#[test]
fn a_first_message_and_an_edit_killed_mid_turn_come_back() {
    // The very first message of a tab: the file holds nothing else, and still comes back.
    let (mut app, _) = common::app(SamplingLayer::default());
    ready(&mut app);
    send(&mut app, "hello there");
    let (uid, chat) = on_disk(&mut app);
    assert!(chat.messages.is_empty());
    let (app2, cmds) = restart(uid, chat);
    assert_eq!(app2.tab().expect("tab").editor.text(), "hello there");
    assert!(history(&cmds).is_empty());

    // An edit of an earlier message: the file keeps the path it forks from, and the edit comes
    // back as an edit of that message.
    let tab = app.tab().expect("tab").id;
    answer(&mut app, tab, "hi");
    let alt = |c| Msg::Key(KeyEvent::new(c, KeyModifiers::ALT));
    app.update(alt(KeyCode::Up));
    app.update(alt(KeyCode::Up));
    app.update(key(KeyCode::Enter));
    assert_eq!(app.tab().expect("tab").editing, Some(0));
    type_text(&mut app, " again");
    app.update(key(KeyCode::Enter));
    let (uid, chat) = on_disk(&mut app);
    assert_eq!(chat.messages.len(), 2);
    assert!(chat.branches.is_empty(), "no fork on disk before the turn");
    let edits = chat.unsent.as_ref().and_then(|u| u.edits);
    assert_eq!(edits, Some(chat.messages[0].id));
    let (app3, cmds) = restart(uid, chat);
    let t = app3.tab().expect("tab");
    assert_eq!(t.editor.text(), "hello there again");
    assert_eq!(t.editing, Some(0));
    assert_eq!(history(&cmds).len(), 1);
}
