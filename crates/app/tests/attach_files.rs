//! Text files attached with `/attach`: chips in the input and on the message, the context
//! meter's estimate, the text the engine gets (the same as the history rebuilt from the chat),
//! refusals, `/detach`, edits, and the files kept in the chat file, exported and searched.

mod common;

use common::{draw, key, ready_app, type_text};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use gemma_app::app::persist::exchanges;
use gemma_app::app::{App, Msg, Overlay};
use gemma_app::attach::{TextFile, compose};
use gemma_app::chats::SavedChat;
use gemma_protocol::{Command, Event, Reuse, TurnEnd, TurnStats};

/// The fixtures, relative to the crate (the tests' working directory): names stay the same on
/// every machine.
const DIR: &str = "tests/fixtures/attach";

fn command(app: &mut App, line: &str) {
    type_text(app, line);
    app.update(key(KeyCode::Enter));
}

fn fixture(name: &str) -> TextFile {
    let path = format!("{DIR}/{name}");
    let text = std::fs::read_to_string(&path).expect("fixture");
    TextFile::new(path, text)
}

fn stats() -> TurnStats {
    TurnStats {
        reuse: Reuse::New,
        reused_tokens: 0,
        prefilled_tokens: 120,
        prefill_tok_s: 200.0,
        decode_tok_s: 12.5,
        ttft_s: 0.1,
        generated_tokens: 4,
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: 0,
        speculation: None,
    }
}

/// Sends what is typed; returns the submitted text.
fn send(app: &mut App, text: &str) -> String {
    type_text(app, text);
    match app.update(key(KeyCode::Enter)).as_slice() {
        [Command::Submit { text, .. }] => text.clone(),
        other => panic!("expected one submit, got {other:?}"),
    }
}

fn answer(app: &mut App, text: &str) {
    let tab = app.tab().expect("tab").id;
    app.update(Msg::Engine(Event::Token {
        tab,
        text: text.into(),
    }));
    app.update(Msg::Engine(Event::Committed { tab, tokens: 124 }));
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(1),
        stats: stats(),
    }));
}

#[test]
fn attached_files_show_as_chips_and_count_in_the_meter() {
    let mut app = ready_app();
    command(&mut app, &format!("/attach {DIR}/hello.rs {DIR}/notes.md"));
    assert_eq!(
        app.flash.as_deref(),
        Some("attached 2 files: /detach removes them")
    );
    type_text(&mut app, "What does it print?");
    let t = app.tab().expect("tab");
    let pending = fixture("hello.rs").tokens() + fixture("notes.md").tokens();
    assert_eq!(t.pending_tokens(), pending);
    insta::assert_snapshot!("file_chips_and_meter", draw(&mut app, 100, 12).backend());
    let screen = format!("{:?}", draw(&mut app, 100, 12).backend().buffer());
    assert!(
        screen.contains(&format!("ctx 0 + ~{pending}/8192")),
        "{screen}"
    );
    // Sent: the chips move to the message, the meter's estimate goes.
    send(&mut app, "");
    answer(&mut app, "It prints a greeting.");
    insta::assert_snapshot!(
        "file_chips_on_the_message",
        draw(&mut app, 100, 14).backend()
    );
}

#[test]
fn the_turn_sent_and_the_history_rebuilt_are_the_same_text() {
    let mut app = ready_app();
    command(&mut app, &format!("/attach {DIR}/*"));
    let files = vec![fixture("hello.rs"), fixture("notes.md")];
    let sent = send(&mut app, "Explain both.");
    assert_eq!(sent, compose(&files, "Explain both."));
    assert!(sent.starts_with("File: tests/fixtures/attach/hello.rs\n```rust\n/// Greets"));
    // notes.md holds a fence of three backticks: its own fence is four.
    assert!(sent.contains("File: tests/fixtures/attach/notes.md\n````markdown\n# Notes"));
    assert!(sent.ends_with("cargo run\n```\n````\n\nExplain both."));
    let t = app.tab().expect("tab");
    let m = t.messages.last().expect("message");
    assert_eq!((m.text.as_str(), m.files.clone()), ("Explain both.", files));
    answer(&mut app, "Done.");
    let history = exchanges(&app.tab().expect("tab").messages);
    assert_eq!(history[0].user, sent, "byte for byte");
    // Files alone, no typed text.
    command(&mut app, &format!("/attach {DIR}/hello.rs"));
    let alone = send(&mut app, "");
    assert_eq!(alone, compose(&[fixture("hello.rs")], ""));
    assert!(alone.ends_with("}\n```"));
}

#[test]
fn binary_large_missing_and_unmatched_files_are_refused() {
    let mut app = ready_app();
    let dir = tempfile::tempdir().expect("tmp");
    let bin = dir.path().join("x.bin");
    std::fs::write(&bin, b"\x7fELF\x02\x01\x01\0\0\0").expect("write");
    command(&mut app, &format!("/attach {}", bin.display()));
    let flash = app.flash.clone().unwrap_or_default();
    assert!(
        flash.ends_with("x.bin: it is not text (binary data)"),
        "{flash}"
    );
    let big = dir.path().join("big.txt");
    std::fs::write(&big, "x".repeat(3000)).expect("write");
    let mut config = gemma_app::config::Config::builtin().expect("config");
    config.ui.attach_max_kb = 2;
    app.config = Some(Box::new(config));
    command(&mut app, &format!("/attach {}", big.display()));
    let flash = app.flash.clone().unwrap_or_default();
    assert!(
        flash.ends_with("big.txt: it is 3.0 kB, above ui.attach_max_kb = 2 KiB"),
        "{flash}"
    );
    command(&mut app, &format!("/attach {}/*.py", dir.path().display()));
    assert_eq!(
        app.flash,
        Some(format!("nothing matches {}/*.py", dir.path().display()))
    );
    command(&mut app, &format!("/attach {}", dir.path().display()));
    assert!(
        app.flash
            .as_deref()
            .is_some_and(|f| f.contains("is a folder"))
    );
    // One good file among bad ones is attached; the bad ones are named.
    command(&mut app, &format!("/attach {DIR}/hello.rs nowhere.txt"));
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.starts_with("attached [file hello.rs · "), "{flash}");
    assert!(
        flash.contains("; cannot attach nowhere.txt: No such file"),
        "{flash}"
    );
    assert_eq!(app.tab().map(|t| t.files.len()), Some(1));
}

#[test]
fn detach_removes_pictures_and_files_by_number() {
    let mut app = ready_app();
    let picture = "../../tests/fixtures/vision/e2b_style/a.png";
    command(
        &mut app,
        &format!("/attach {picture} {DIR}/hello.rs {DIR}/notes.md"),
    );
    let t = app.tab().expect("tab");
    assert_eq!((t.attachments.len(), t.files.len()), (1, 2));
    command(&mut app, "/detach 3");
    assert!(app.flash.as_deref().is_some_and(|f| f.contains("notes.md")));
    command(&mut app, "/detach 9");
    assert_eq!(app.flash.as_deref(), Some("there is no attachment 9"));
    command(&mut app, "/detach");
    assert_eq!(app.flash.as_deref(), Some("removed 2 attachments"));
    let t = app.tab().expect("tab");
    assert!(t.attachments.is_empty() && t.files.is_empty());
}

#[test]
fn an_edit_keeps_the_files_and_sends_them_again() {
    let mut app = ready_app();
    command(&mut app, &format!("/attach {DIR}/hello.rs"));
    send(&mut app, "What is it?");
    answer(&mut app, "A program.");
    let alt_up = Msg::Key(KeyEvent::new(KeyCode::Up, KeyModifiers::ALT));
    app.update(alt_up.clone());
    app.update(alt_up);
    app.update(key(KeyCode::Enter));
    assert_eq!(app.tab().map(|t| t.files.len()), Some(1));
    for _ in 0.."What is it?".len() {
        app.update(key(KeyCode::Backspace));
    }
    let cmds = type_text(&mut app, "Who wrote it?");
    assert!(cmds.is_empty());
    let cmds = app.update(key(KeyCode::Enter));
    let submitted = cmds.iter().find_map(|c| match c {
        Command::Submit { text, .. } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(
        submitted,
        Some(compose(&[fixture("hello.rs")], "Who wrote it?"))
    );
}

#[test]
fn files_are_kept_with_the_chat_exported_and_found() {
    let mut app = ready_app();
    command(&mut app, &format!("/attach {DIR}/hello.rs"));
    let sent = send(&mut app, "Explain.");
    answer(&mut app, "It greets.");
    let json = serde_json::to_string(&app.saved(0)).expect("json");
    assert!(json.contains("\"files\":[{\"name\":\"tests/fixtures/attach/hello.rs\""));
    // Reopened in another app: the same files, the same text for the engine, even with the
    // file gone (the contents are the chat's).
    let chat: SavedChat = serde_json::from_str(&json).expect("reads");
    let mut other = ready_app();
    let cmds = other.restore(vec![("chat-x".into(), chat.clone())], Vec::new());
    let history = cmds.iter().find_map(|c| match c {
        Command::Attach { history, .. } if !history.is_empty() => Some(history.clone()),
        _ => None,
    });
    assert_eq!(history.map(|h| h[0].user.clone()), Some(sent));
    let m = &other.tab().expect("tab").messages[0];
    assert_eq!(m.files, vec![fixture("hello.rs")]);
    let md = gemma_app::chats::export::markdown(&chat);
    assert!(
        md.contains("<details><summary>File: tests/fixtures/attach/hello.rs (84 B)</summary>"),
        "{md}"
    );
    assert!(
        md.contains("```rust\n/// Greets whoever runs it.\n"),
        "{md}"
    );
    // Search finds the file's contents.
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('f'),
        KeyModifiers::CONTROL,
    )));
    type_text(&mut app, "lighthouse keeper");
    let Overlay::Search(s) = &app.overlay else {
        panic!("search is open");
    };
    assert_eq!(s.hits.len(), 1);
    assert!(s.hits[0].snippet.starts_with("file: "), "{:?}", s.hits[0]);
}

#[test]
fn chat_files_without_attached_files_still_load() {
    let v4 = r#"{"version":4,"order":0,"title":"old","model":"gemma-3-270m (demo)",
        "thinking":false,"messages":[{"id":1,"role":"user","text":"Hi"},
        {"id":2,"parent":1,"role":"model","text":"Hello!"}]}"#;
    let chat: SavedChat = serde_json::from_str(v4).expect("an older file parses");
    let mut app = ready_app();
    app.restore(vec![("chat-old".into(), chat)], Vec::new());
    let t = app.tab().expect("tab");
    assert!(t.messages.iter().all(|m| m.files.is_empty()));
    assert_eq!(exchanges(&t.messages)[0].user, "Hi");
    let saved = serde_json::to_value(app.saved(0)).expect("json");
    assert!(saved["messages"][0].get("files").is_none(), "{saved}");
}

/// A pasted path to a pipe is not read (it could block for ever): it stays text, and the app
/// says why it was not attached (probe 2026-12-06, F12).
#[test]
fn a_pasted_pipe_stays_text_and_says_so() {
    let dir = tempfile::tempdir().expect("tmp");
    let fifo = dir.path().join("photo.png");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let mut app = ready_app();
    app.update(Msg::Paste(fifo.display().to_string()));
    let t = app.tab().expect("tab");
    assert!(t.attachments.is_empty());
    assert_eq!(t.editor.text(), fifo.display().to_string());
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.contains("not a regular file"), "{flash}");
}
