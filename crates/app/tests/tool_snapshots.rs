//! Tool calls in the real `App` and renderer: the approval pane (queued calls, a tab not shown,
//! the keys and the note), the collapsed and expanded lines under an answer, `/tools`, and a
//! chat with calls saved, loaded (from the previous format too), searched and exported.

mod common;

use common::{draw, key, ready_app as new_app, type_text};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use gemma_app::app::{App, Msg};
use gemma_app::chats::{SaveJob, SavedChat, VERSION, export};
use gemma_app::config::Config;
use gemma_protocol::{
    Command, Event, Reuse, ServerInfo, TabId, ToolCall, ToolChoice, ToolDecision, ToolInfo,
    ToolOutcome, ToolSelection, TurnEnd, TurnStats,
};

fn send(app: &mut App, text: &str) -> TabId {
    type_text(app, text);
    match app.update(key(KeyCode::Enter)).as_slice() {
        [Command::Submit { tab, .. }] => *tab,
        other => panic!("expected one submit, got {other:?}"),
    }
}

fn call(id: u64, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id,
        name: name.into(),
        server: "files".into(),
        arguments: arguments.into(),
        ..Default::default()
    }
}

fn asks(app: &mut App, tab: TabId, c: ToolCall) {
    app.update(Msg::Engine(Event::ToolCall {
        tab,
        call: c,
        approval: true,
    }));
}

fn result(app: &mut App, tab: TabId, id: u64, ok: bool, text: &str, bytes: usize) {
    app.update(Msg::Engine(Event::ToolResult {
        tab,
        outcome: ToolOutcome {
            id,
            name: "read_file".into(),
            ok,
            text: text.into(),
            bytes,
            seconds: 0.4,
            ..Default::default()
        },
    }));
}

fn finish(app: &mut App, tab: TabId, calls: usize) {
    let stats = TurnStats {
        reuse: Reuse::ExactPrefix,
        reused_tokens: 10,
        prefilled_tokens: 12,
        prefill_tok_s: 200.0,
        decode_tok_s: 12.5,
        ttft_s: 0.1,
        generated_tokens: 20,
        tool_calls: calls,
        tool_tokens: 40,
        thought_tokens: 0,
        speculation: None,
    };
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(106),
        stats,
    }));
}

/// A turn that reads a file (approved once) and answers from it.
fn a_turn_with_a_call(app: &mut App) -> TabId {
    let tab = send(app, "What is in notes.txt?");
    asks(app, tab, call(1, "read_file", r#"{"path":"notes.txt"}"#));
    let cmds = app.update(key(KeyCode::Char('y')));
    assert_eq!(
        cmds,
        [Command::DecideTool {
            tab,
            call: 1,
            decision: ToolDecision::Once
        }]
    );
    result(app, tab, 1, true, "buy milk\ncall Ada\nfeed the cat", 1234);
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Two things: buy milk, and call Ada.".into(),
    }));
    finish(app, tab, 1);
    tab
}

#[test]
fn the_approval_pane_shows_the_call_and_queues_the_next() {
    let mut app = new_app();
    let tab = send(&mut app, "Tidy my notes");
    let evil = r#"{"path":"notes.txt","mode":"append","text":"a\u001b[2J \u202e line"}"#;
    asks(&mut app, tab, call(1, "write_file", evil));
    asks(
        &mut app,
        tab,
        call(2, "read_file", r#"{"path":"todo.txt"}"#),
    );
    // Typing does not reach the input while a call waits.
    let cmds = type_text(&mut app, "q");
    assert!(cmds.is_empty());
    insta::assert_snapshot!("approval_pane", draw(&mut app, 80, 24).backend());
    // n opens the note; Enter denies with it, and the next call shows.
    app.update(key(KeyCode::Char('n')));
    type_text(&mut app, "not that file");
    insta::assert_snapshot!("approval_note", draw(&mut app, 80, 24).backend());
    let cmds = app.update(key(KeyCode::Enter));
    assert_eq!(
        cmds,
        [Command::DecideTool {
            tab,
            call: 1,
            decision: ToolDecision::Deny {
                note: Some("not that file".into())
            }
        }]
    );
    let t = app.tab().expect("tab");
    assert_eq!(t.waiting_call().map(|c| c.id), Some(2));
    assert!(t.editor.is_empty(), "nothing typed went into the input");
    // t approves for the tab; Esc on a later call denies it without a note.
    let cmds = app.update(key(KeyCode::Char('t')));
    assert!(matches!(
        cmds[..],
        [Command::DecideTool {
            call: 2,
            decision: ToolDecision::Tab,
            ..
        }]
    ));
    asks(&mut app, tab, call(3, "read_file", "{}"));
    let cmds = app.update(key(KeyCode::Esc));
    assert!(matches!(
        cmds[..],
        [Command::DecideTool {
            call: 3,
            decision: ToolDecision::Deny { note: None },
            ..
        }]
    ));
    assert!(app.tab().expect("tab").waiting_call().is_none());
    // Calls still open when the turn ends (stopped with Ctrl+C) are marked stopped.
    asks(&mut app, tab, call(4, "read_file", "{}"));
    let stop = Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(app.update(stop), [Command::Cancel { tab }]);
    finish(&mut app, tab, 4);
    let t = app.tab().expect("tab");
    assert!(t.waiting_call().is_none());
    let states: Vec<&str> = t.messages[1]
        .tools
        .iter()
        .map(|r| r.state.as_str())
        .collect();
    assert_eq!(states, ["denied", "stopped", "denied", "stopped"]);
}

#[test]
fn a_call_in_another_tab_waits_for_a_visit_and_always_is_saved() {
    let mut app = new_app();
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[mcp.servers.files]\ncommand = \"srv\"\n").expect("config");
    app.config_path = Some(config);
    let first = send(&mut app, "Look up the weather");
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('t'),
        KeyModifiers::CONTROL,
    )));
    asks(&mut app, first, call(1, "weather", r#"{"city":"Paris"}"#));
    // The shown tab has no pane; the bar marks the waiting one.
    insta::assert_snapshot!("approval_in_another_tab", draw(&mut app, 80, 12).backend());
    assert!(
        type_text(&mut app, "a").is_empty(),
        "typed into this tab's input"
    );
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('1'),
        KeyModifiers::ALT,
    )));
    let cmds = app.update(key(KeyCode::Char('a')));
    assert!(matches!(
        cmds[..],
        [Command::DecideTool {
            call: 1,
            decision: ToolDecision::Always,
            ..
        }]
    ));
    let saves = app.take_saves();
    assert!(
        saves
            .iter()
            .any(|s| matches!(s, SaveJob::AutoApprove { server, tool, .. }
            if server == "files" && tool == "weather")),
        "{saves:?}"
    );
}

/// "Always" says saved only when the config file can take the edit: a server written inline
/// gets the reason, no save is queued, and the call is approved all the same (probe
/// 2026-12-06, F7).
#[test]
fn always_for_a_server_written_inline_says_it_cannot_be_saved() {
    let mut app = new_app();
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "mcp.servers.files = { command = \"srv\" }\n").expect("config");
    app.config_path = Some(config);
    let tab = send(&mut app, "Look up the weather");
    asks(&mut app, tab, call(1, "weather", r#"{"city":"Paris"}"#));
    let cmds = app.update(key(KeyCode::Char('a')));
    assert!(matches!(
        cmds[..],
        [Command::DecideTool {
            decision: ToolDecision::Always,
            ..
        }]
    ));
    let saves = app.take_saves();
    assert!(
        !saves
            .iter()
            .any(|s| matches!(s, SaveJob::AutoApprove { .. })),
        "{saves:?}"
    );
    let flash = app.flash.clone().unwrap_or_default();
    assert!(
        flash.contains("approved until the app ends") && flash.contains("by hand"),
        "{flash}"
    );
}

#[test]
fn calls_fold_under_the_answer_and_open_with_enter() {
    let mut app = new_app();
    let tab = a_turn_with_a_call(&mut app);
    send(&mut app, "And the other file?");
    app.update(Msg::Engine(Event::ToolCall {
        tab,
        call: call(
            2,
            "read_file",
            r#"{"path":"a/very/long/path/that/does/not/fit/on/one/line/of/the/screen.txt"}"#,
        ),
        approval: false,
    }));
    result(&mut app, tab, 2, false, "no such file", 0);
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "It is not there.".into(),
    }));
    finish(&mut app, tab, 1);
    insta::assert_snapshot!("tool_lines_collapsed", draw(&mut app, 80, 24).backend());
    // Alt+Up three times selects the first answer; Enter opens its call.
    for _ in 0..3 {
        app.update(Msg::Key(KeyEvent::new(KeyCode::Up, KeyModifiers::ALT)));
    }
    app.update(key(KeyCode::Enter));
    assert!(app.tab().expect("tab").messages[1].expanded);
    insta::assert_snapshot!("tool_lines_expanded", draw(&mut app, 80, 24).backend());
    // Enter again folds it.
    app.update(key(KeyCode::Enter));
    assert!(!app.tab().expect("tab").messages[1].expanded);
}

#[test]
fn calls_are_saved_loaded_searched_and_exported() {
    let mut app = new_app();
    a_turn_with_a_call(&mut app);
    let saved = app.saved(0);
    assert_eq!(saved.version, VERSION);
    let json = serde_json::to_string(&saved).expect("json");
    let back: SavedChat = serde_json::from_str(&json).expect("reads");
    assert_eq!(back, saved);
    let tools = &back.messages[1].tools;
    assert_eq!(
        (tools[0].name.as_str(), tools[0].status.as_str()),
        ("read_file", "ok")
    );
    // Restored into a fresh app: the call is on the answer again, and search finds its result.
    let mut again = new_app();
    again.restore(vec![("c".into(), back.clone())], Vec::new());
    let m = &again.tabs[0].messages[1];
    assert_eq!((m.tools.len(), m.tools[0].bytes), (1, 1234));
    let hits = gemma_app::app::search::search(&again.tabs, "FEED the", 10);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(
        (hits[0].message, hits[0].snippet.as_str()),
        (1, "tool: buy milk call Ada feed the cat")
    );
    let md = export::export(&back, export::Format::Markdown);
    assert!(
        md.contains(
            "<details><summary>tool read_file({\"path\":\"notes.txt\"}) → 1.2 kB</summary>\n\n\
             Arguments (server files):\n\n```json\n{\n  \"path\": \"notes.txt\"\n}\n```\n\n\
             Result:\n\n```\nbuy milk\ncall Ada\nfeed the cat\n```\n\n</details>"
        ),
        "{md}"
    );
    let json = export::export(&back, export::Format::Json);
    assert!(json.contains("\"tools\": ["), "{json}");
}

#[test]
fn a_chat_of_the_previous_format_loads_without_tools() {
    let v3 = r#"{"version":3,"order":0,"title":"old","model":"gemma-3-270m (demo)",
        "thinking":false,"messages":[{"id":1,"role":"user","text":"hi"},
        {"id":2,"parent":1,"role":"model","text":"hello","footer":"done",
         "stats":{"reuse":"new","reused_tokens":0,"prefilled_tokens":5,"generated_tokens":2,
                  "prefill_tok_s":1.0,"decode_tok_s":1.0,"ttft_s":0.1}}]}"#;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("old.json"), v3).expect("write");
    let (chats, warnings) = gemma_app::chats::load_chats(dir.path());
    assert!(warnings.is_empty(), "{warnings:?}");
    let mut app = new_app();
    app.restore(chats, warnings);
    let t = &app.tabs[0];
    assert_eq!(t.messages[1].text, "hello");
    assert!(t.messages[1].tools.is_empty());
    assert_eq!(t.messages[1].stats.as_ref().map(|s| s.tool_calls), Some(0));
    let saved = app.saved(0);
    assert_eq!(saved.version, VERSION, "saved again in the new format");
}

#[test]
fn tools_are_listed_and_chosen_per_tab() {
    let mut app = new_app();
    app.update(Msg::Engine(Event::Tools {
        servers: vec![
            ServerInfo {
                name: "files".into(),
                transport: "stdio".into(),
                state: "ready".into(),
                tools: vec!["read_file".into()],
                error: None,
            },
            ServerInfo {
                name: "web".into(),
                transport: "http".into(),
                state: "failed".into(),
                tools: Vec::new(),
                error: Some("connection refused".into()),
            },
        ],
        tools: vec![ToolInfo {
            name: "read_file".into(),
            server: "files".into(),
            description: "Reads a file under the allowed directories".into(),
            parameters: "{}".into(),
            auto_approve: false,
        }],
    }));
    type_text(&mut app, "/tools");
    app.update(key(KeyCode::Enter));
    insta::assert_snapshot!("tools_listing", draw(&mut app, 80, 16).backend());
    type_text(&mut app, "/tools only files.nope");
    assert!(
        app.update(key(KeyCode::Enter)).is_empty(),
        "an unknown name is refused"
    );
    app.tabs[0].editor.take();
    type_text(&mut app, "/tools only files");
    let tab = app.tabs[0].id;
    let cmds = app.update(key(KeyCode::Enter));
    let s = common::configured(&cmds, tab).expect("told");
    assert_eq!(cmds.len(), 1);
    assert_eq!(
        (&s.tools, s.tool_choice),
        (&ToolSelection::Only(vec!["files".into()]), ToolChoice::Auto)
    );
    type_text(&mut app, "/tool-choice required");
    let cmds = app.update(key(KeyCode::Enter));
    let s = common::configured(&cmds, tab).expect("told");
    assert_eq!(
        (&s.tools, s.tool_choice),
        (
            &ToolSelection::Only(vec!["files".into()]),
            ToolChoice::Required
        )
    );
    // Kept with the chat, and told to the engine when it comes back.
    let saved = app.saved(0);
    let mut again = new_app();
    let cmds = again.restore(vec![("c".into(), saved)], Vec::new());
    let s = common::configured(&cmds, again.tab().expect("tab").id).expect("told");
    assert_eq!(s.tool_choice, ToolChoice::Required, "{cmds:?}");
    assert!(matches!(s.tools, ToolSelection::Only(_)), "{cmds:?}");
}

#[test]
fn the_first_tab_takes_the_configured_tool_choice() {
    // The first tab opens before the config is in (App::new); the front end applies it after.
    let mut app = new_app();
    let config = Config::from_layers(Some((
        std::path::Path::new("config.toml"),
        "[tools]\nchoice = \"required\"\n",
    )))
    .expect("config");
    app.config = Some(Box::new(config));
    let cmds = app.apply_default_tools();
    let tab = app.tab().expect("a tab").id;
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    let s = common::configured(&cmds, tab).expect("told");
    assert_eq!(
        (&s.tools, s.tool_choice),
        (&ToolSelection::All, ToolChoice::Required)
    );
    assert!(app.apply_default_tools().is_empty(), "once");
}

#[test]
fn a_saved_chat_gives_the_engine_its_calls_as_the_model_wrote_and_read_them() {
    let mut app = new_app();
    let tab = send(&mut app, "Weather?");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Let me see.".into(),
    }));
    let c = ToolCall {
        written: "call:forecast{city:<|\"|>Paris<|\"|>}".into(),
        at: 11,
        handover: 0,
        ..call(1, "forecast", r#"{"city":"Paris"}"#)
    };
    app.update(Msg::Engine(Event::ToolCall {
        tab,
        call: c.clone(),
        approval: false,
    }));
    let outcome = ToolOutcome {
        id: 1,
        name: "forecast".into(),
        ok: true,
        text: "sunny".into(),
        structured: Some(r#"{"sky":"sunny"}"#.into()),
        bytes: 5,
        seconds: 0.1,
    };
    app.update(Msg::Engine(Event::ToolResult {
        tab,
        outcome: outcome.clone(),
    }));
    app.update(Msg::Engine(Event::Token {
        tab,
        text: " Sunny.".into(),
    }));
    finish(&mut app, tab, 1);
    let made = gemma_protocol::CallMade::new(&c, Some(&outcome));
    let live = gemma_app::app::persist::exchanges(&app.tab().expect("tab").messages);
    assert_eq!(live[0].calls, [made]);
    assert_eq!(live[0].answer, "Let me see. Sunny.");
    // Saved, read back and restored: the engine is given the same calls.
    let json = serde_json::to_string(&app.saved(0)).expect("json");
    let back: SavedChat = serde_json::from_str(&json).expect("reads");
    let mut again = new_app();
    let cmds = again.restore(vec![("c".into(), back)], Vec::new());
    let history = cmds
        .iter()
        .rev()
        .find_map(|c| match c {
            Command::Attach { history, .. } => Some(history.clone()),
            _ => None,
        })
        .expect("attached");
    assert_eq!(history, live);
}
