//! Snapshot tests of the real `App` and renderer: synthetic key and engine events in, a
//! `TestBackend` screen out (insta snapshots in `crates/app/tests/snapshots/`).

mod common;

use std::time::{Duration, Instant};

use common::{draw, draw_at, key, type_text};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use gemma_app::app::{App, Msg, Overlay};
use gemma_app::config::Config;
use gemma_app::config::sampling::{SamplingLayer, Source};
use gemma_protocol::{Command, Event, ProgressUnit, Reuse, TabId, Tier, TurnEnd, TurnStats};

fn new_app() -> (App, Vec<Command>) {
    common::app(SamplingLayer {
        temperature: Some(0.7),
        ..SamplingLayer::default()
    })
}

fn ctrl(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL))
}

fn ready(app: &mut App) {
    app.update(Msg::Engine(Event::Ready {
        model: "gemma3_text".into(),
        context_length: 8192,
        thinking: false,
        tool_calls: false,
        generation: SamplingLayer {
            temperature: Some(1.0),
            top_k: Some(64),
            top_p: Some(0.95),
            ..SamplingLayer::default()
        },
    }));
}

/// What the engine sends when a turn ends: the conversation's size (the prompt and the answer
/// committed), then the end with its stats.
fn finish(app: &mut App, tab: TabId, end: TurnEnd, stats: TurnStats) {
    let tokens = stats.reused_tokens + stats.prefilled_tokens + stats.generated_tokens;
    app.update(Msg::Engine(Event::Committed { tab, tokens }));
    app.update(Msg::Engine(Event::Finished { tab, end, stats }));
}

fn stats(reused: usize, prefilled: usize, generated: usize) -> TurnStats {
    TurnStats {
        reuse: if reused == 0 {
            Reuse::New
        } else {
            Reuse::ExactPrefix
        },
        reused_tokens: reused,
        prefilled_tokens: prefilled,
        prefill_tok_s: 200.0,
        decode_tok_s: 12.5,
        ttft_s: 0.1,
        generated_tokens: generated,
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: 0,
        speculation: None,
    }
}

/// Sends `text` in the active tab and returns its id.
fn send(app: &mut App, text: &str) -> u64 {
    type_text(app, text);
    let cmds = app.update(key(KeyCode::Enter));
    match cmds.as_slice() {
        [Command::Submit { tab, text: t, .. }] => {
            assert_eq!(t, text);
            *tab
        }
        other => panic!("expected one submit, got {other:?}"),
    }
}

#[test]
fn start_up_shows_loading_progress() {
    let (mut app, cmds) = new_app();
    assert!(matches!(cmds[0], Command::Configure { tab: 1, .. }));
    app.update(Msg::Engine(Event::Loading {
        stage: "loading weights".into(),
        done: 9,
        total: 18,
        unit: ProgressUnit::Layers,
    }));
    insta::assert_snapshot!(draw(&mut app, 80, 24).backend());
}

#[test]
fn streaming_mid_answer_with_markdown() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Write a haiku about Rust, then a code sample.");
    let t0 = Instant::now();
    app.update(Msg::Tick(t0));
    app.update(Msg::Engine(Event::Prefill {
        tab,
        done: 24,
        total: 24,
        reused: 0,
    }));
    let answer = "# A haiku\n\n*Borrowed* memory,\n**lifetimes** end where scopes close,\n\
                  the `borrow` checker smiles.\n\n- short\n- sweet\n\n```rust\nfn main() {\n    \
                  println!(\"hi\");\n}\n```\nMore to";
    for piece in answer.split_inclusive(' ') {
        app.update(Msg::Engine(Event::Token {
            tab,
            text: piece.into(),
        }));
    }
    app.update(Msg::Tick(t0 + Duration::from_secs(2)));
    insta::assert_snapshot!(draw_at(&mut app, 80, 24, t0 + Duration::from_secs(2)).backend());
}

#[test]
fn two_tabs_with_their_states() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let first = send(&mut app, "Hello");
    app.update(Msg::Engine(Event::Token {
        tab: first,
        text: "Hi! How can I help?".into(),
    }));
    finish(&mut app, first, TurnEnd::EndOfTurn(106), stats(0, 12, 7));
    let cmds = app.update(ctrl('t'));
    assert!(matches!(cmds[0], Command::Configure { tab: 2, .. }));
    let second = send(&mut app, "Tell me a story");
    app.update(Msg::Engine(Event::Prefill {
        tab: second,
        done: 128,
        total: 300,
        reused: 0,
    }));
    app.update(Msg::Engine(Event::TabState {
        tab: first,
        tier: Tier::Host,
    }));
    insta::assert_snapshot!("two_tabs_second", draw(&mut app, 80, 16).backend());
    // Alt+1 goes back to the first, which shows its stats.
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('1'),
        KeyModifiers::ALT,
    )));
    assert_eq!(app.active, 0);
    insta::assert_snapshot!("two_tabs_first", draw(&mut app, 80, 16).backend());
}

#[test]
fn help_overlay_lists_the_keymap() {
    let (mut app, _) = new_app();
    ready(&mut app);
    app.update(key(KeyCode::Char('?')));
    assert_eq!(app.overlay, Overlay::Help);
    insta::assert_snapshot!(draw(&mut app, 100, 30).backend());
    // Taller than the screen: it scrolls to its end.
    app.update(key(KeyCode::PageDown));
    assert_eq!(app.overlay, Overlay::Help);
    insta::assert_snapshot!("help_overlay_scrolled", draw(&mut app, 100, 30).backend());
    // Any other key closes it; `?` in a non-empty input is typed, not help.
    app.update(key(KeyCode::Esc));
    assert_eq!(app.overlay, Overlay::None);
    type_text(&mut app, "why?");
    assert_eq!(app.overlay, Overlay::None);
    assert_eq!(app.tab().expect("tab").editor.text(), "why?");
}

#[test]
fn context_warning_near_the_limit() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Summarise our chat.");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "We talked about many things.".into(),
    }));
    finish(&mut app, tab, TurnEnd::EndOfTurn(106), stats(7600, 210, 30));
    insta::assert_snapshot!(draw(&mut app, 100, 12).backend());
}

#[test]
fn errors_show_what_to_do() {
    let (mut app, _) = new_app();
    app.update(Msg::Engine(Event::LoadFailed {
        error: "cannot read /models/missing.gguf: No such file or directory (os error 2)".into(),
    }));
    insta::assert_snapshot!("load_failed", draw(&mut app, 80, 16).backend());

    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "A very long message");
    app.update(Msg::Engine(Event::Failed {
        tab,
        error: "context length exceeded: 9000 tokens needed, the limit is 8192; start a new tab"
            .into(),
    }));
    insta::assert_snapshot!("turn_failed", draw(&mut app, 80, 12).backend());
}

#[test]
fn resize_to_a_small_terminal() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Explain borrowing in one paragraph.");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Borrowing lets code use a value without owning it; the compiler checks that \
               every borrow ends before the value is dropped or changed."
            .into(),
    }));
    draw(&mut app, 80, 24);
    insta::assert_snapshot!(draw(&mut app, 40, 12).backend());
}

#[test]
fn scrolling_holds_its_place_while_output_streams() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Count");
    for i in 0..60 {
        app.update(Msg::Engine(Event::Token {
            tab,
            text: format!("line {i}\n"),
        }));
    }
    draw(&mut app, 60, 20);
    app.update(key(KeyCode::PageUp));
    let pinned = app.tab().expect("tab").pin.expect("pinned");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "more\n".into(),
    }));
    draw(&mut app, 60, 20);
    let t = app.tab().expect("tab");
    assert_eq!(t.pin, Some(pinned), "the view holds its place");
    assert!(t.new_output, "and says new output came");
    insta::assert_snapshot!(draw(&mut app, 60, 20).backend());
    app.update(key(KeyCode::End));
    let t = app.tab().expect("tab");
    assert_eq!(t.pin, None, "End follows the output again");
}

#[test]
fn stop_close_confirm_regenerate_and_quit() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Go on");
    assert_eq!(app.update(key(KeyCode::Esc)), vec![Command::Cancel { tab }]);
    // Closing a generating tab asks first.
    assert!(app.update(ctrl('w')).is_empty());
    assert_eq!(app.overlay, Overlay::ConfirmClose(tab));
    insta::assert_snapshot!(draw(&mut app, 60, 10).backend());
    app.take_saves();
    let cmds = app.update(key(KeyCode::Char('y')));
    assert!(cmds.contains(&Command::CloseTab { tab }));
    // The tab is written as it stands before it is archived (its turn never saved it).
    use gemma_app::chats::SaveJob;
    let saves = app.take_saves();
    let wrote = saves
        .iter()
        .position(|j| matches!(j, SaveJob::Write(_, c) if !c.messages.is_empty()));
    let archived = saves.iter().position(|j| matches!(j, SaveJob::Archive(_)));
    assert!(
        matches!((wrote, archived), (Some(w), Some(a)) if w < a),
        "{saves:?}"
    );
    assert_eq!(app.tabs.len(), 1, "a fresh tab replaces the last one");
    // Regenerate on an answered tab.
    let tab = send(&mut app, "Hi");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Hello".into(),
    }));
    finish(&mut app, tab, TurnEnd::EndOfTurn(106), stats(0, 5, 1));
    assert_eq!(app.update(ctrl('r')), vec![Command::Regenerate { tab }]);
    assert_eq!(
        app.tab().expect("tab").messages.len(),
        1,
        "the old answer leaves the path (it stays as version 1)"
    );
    // Ctrl+C twice on an idle app quits.
    finish(&mut app, tab, TurnEnd::EndOfTurn(106), stats(5, 1, 1));
    app.update(ctrl('c'));
    assert!(!app.quit);
    app.update(ctrl('c'));
    assert!(app.quit);
}

#[test]
fn per_tab_settings_show_their_source_and_reach_the_engine() {
    let (mut app, _) = new_app();
    ready(&mut app);
    app.update(key(KeyCode::F(4)));
    insta::assert_snapshot!("settings_popup", draw(&mut app, 80, 16).backend());
    // Temperature down one step (0.7 → 0.6), top_p down one (0.95 → 0.9), then apply.
    app.update(key(KeyCode::Left));
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Left));
    let cmds = app.update(key(KeyCode::Enter));
    match cmds.as_slice() {
        [Command::Configure { tab: 1, settings }] => {
            let sampling = &settings.sampling;
            assert!((sampling.temperature - 0.6).abs() < 1e-6, "{sampling:?}");
            assert!((sampling.top_p - 0.9).abs() < 1e-6, "{sampling:?}");
            assert_eq!(sampling.top_k, 64, "top_k still from the model");
        }
        other => panic!("expected the tab's settings, got {other:?}"),
    }
    let t = app.tab().expect("tab");
    let r = app.tab_sampling(t);
    assert_eq!(r.sources[0], Source::Tab);
    assert_eq!(r.sources[1], Source::Model);
    // Turns typed while the model loads wait for it, so they use its defaults.
    let (mut app, _) = new_app();
    type_text(&mut app, "early");
    assert!(app.update(key(KeyCode::Enter)).is_empty());
    let cmds = app.update(Msg::Engine(Event::Ready {
        model: "gemma3_text".into(),
        context_length: 8192,
        thinking: false,
        tool_calls: false,
        generation: SamplingLayer::default(),
    }));
    assert!(matches!(cmds.first(), Some(Command::Configure { .. })));
    assert!(matches!(cmds.last(), Some(Command::Submit { tab: 1, .. })));
}

#[test]
fn a_reloaded_config_applies_to_the_next_turn_and_a_bad_one_is_shown() {
    let (mut app, _) = new_app();
    ready(&mut app);
    app.config = Some(Box::new(Config::builtin().expect("config")));
    let text = "[sampling]\ntemperature = 0.3\n[model]\ncontext_length = 4096\n[ui.keys]\nquit = [\"ctrl+x\"]\n";
    let c = Config::from_layers(Some((std::path::Path::new("c.toml"), text))).expect("valid");
    let cmds = app.update(Msg::Config(Ok(Box::new(c))));
    match cmds.as_slice() {
        [Command::Configure { settings, .. }] => {
            assert!((settings.sampling.temperature - 0.3).abs() < 1e-6);
            let mode = settings.overflow.mode;
            assert_eq!(mode, gemma_protocol::OverflowMode::Compact);
        }
        other => panic!("expected new settings, got {other:?}"),
    }
    let flash = app.flash.clone().unwrap_or_default();
    assert!(
        flash.contains("context length applies to new tabs"),
        "{flash}"
    );
    // A new tab gets the new context length; the open one keeps its own.
    let cmds = app.update(ctrl('t'));
    let context = common::configured(&cmds, 2).and_then(|s| s.context);
    assert_eq!(context, Some(4096), "{cmds:?}");
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('1'),
        KeyModifiers::ALT,
    )));
    app.update(ctrl('x'));
    assert!(app.quit, "the new key is in force");
    app.quit = false;
    // A bad edit right after a good one is shown at once, not behind "config reloaded".
    app.update(Msg::Config(Ok(Box::new(
        Config::from_layers(Some((std::path::Path::new("c.toml"), text))).expect("valid"),
    ))));
    assert!(app.flash.is_some());
    let cmds = app.update(Msg::Config(Err(
        "c.toml:2:15: `sampling.temperature` = 9 is out of range".into(),
    )));
    assert!(cmds.is_empty());
    assert_eq!(
        app.flash, None,
        "the error is not hidden by the last reload's note"
    );
    let t = app.tab().expect("tab");
    assert!(
        (app.tab_sampling(t).params.temperature - 0.3).abs() < 1e-6,
        "the last good config stays"
    );
    insta::assert_snapshot!(draw(&mut app, 100, 8).backend());
}

#[test]
fn thoughts_show_collapsed_and_expand() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Is 91 prime?");
    for piece in [
        "91 is odd. ",
        "Try 7: ",
        "7 x 13 = 91.\n",
        "So it is not prime.",
    ] {
        app.update(Msg::Engine(Event::Thought {
            tab,
            text: piece.into(),
            tokens: 0,
        }));
    }
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "No: 91 = 7 x 13.".into(),
    }));
    insta::assert_snapshot!("thought_collapsed", draw(&mut app, 60, 14).backend());
    app.update(ctrl('o'));
    assert!(app.show_thoughts);
    insta::assert_snapshot!("thought_expanded", draw(&mut app, 60, 14).backend());
}

#[test]
fn input_history_paste_and_multiline() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "first question");
    finish(&mut app, tab, TurnEnd::EndOfTurn(106), stats(0, 5, 0));
    send(&mut app, "second question");
    finish(&mut app, tab, TurnEnd::EndOfTurn(106), stats(5, 5, 0));
    let editor = |app: &App| app.tab().expect("tab").editor.text();
    app.update(key(KeyCode::Up));
    assert_eq!(editor(&app), "second question");
    app.update(key(KeyCode::Up));
    assert_eq!(editor(&app), "first question");
    app.update(key(KeyCode::Down));
    assert_eq!(editor(&app), "second question");
    app.update(key(KeyCode::Down));
    assert_eq!(editor(&app), "", "past the newest entry: an empty input");
    // A bracketed paste keeps its newlines; Alt+Enter adds one; Enter sends it all.
    app.update(Msg::Paste("line one\nline two".into()));
    app.update(Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT)));
    type_text(&mut app, "line three");
    assert_eq!(editor(&app), "line one\nline two\nline three");
    insta::assert_snapshot!(draw(&mut app, 60, 14).backend());
    let cmds = app.update(key(KeyCode::Enter));
    assert!(
        matches!(cmds.as_slice(), [Command::Submit { text, .. }] if text == "line one\nline two\nline three"),
        "{cmds:?}"
    );
}

#[test]
fn a_failing_chat_template_is_shown_with_its_line_and_flagged_in_the_status_line() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Hello");
    app.update(Msg::Engine(Event::TemplateFallback {
        tab,
        error: "the chat template (chat_template.jinja) failed: unknown method: map has no \
                method named get (line 236)"
            .into(),
    }));
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Hi! How can I help?".into(),
    }));
    finish(&mut app, tab, TurnEnd::EndOfTurn(106), stats(0, 12, 6));
    assert!(app.model.template_fallback);
    insta::assert_snapshot!(draw(&mut app, 100, 14).backend());
}

/// A chat file of the previous release (version 1, with the conversation in ids) still loads:
/// its tab is attached to the engine's conversation under the file's name, with the transcript's
/// exchanges and the old ids for the engine to take over; today's files hold no ids.
#[test]
fn restored_chats_attach_to_the_engines_conversations() {
    use gemma_app::chats::SavedChat;
    use gemma_protocol::{Exchange, LegacyConvo};
    let (mut app, _) = new_app();
    let v1 = r#"{"version":1,"order":0,"title":"old","model":"gemma-3-270m (demo)",
        "thinking":false,"messages":[
          {"role":"user","text":"Hi"},{"role":"model","text":"Hello!","footer":"done"},
          {"role":"notice","text":"a note"},{"role":"user","text":"Bye"}],
        "ids":[2,10,11,12,13],"header":0,"last_answer":3}"#;
    let chat: SavedChat = serde_json::from_str(v1).expect("a version 1 file parses");
    let cmds = app.restore(vec![("chat-old-1".into(), chat)], Vec::new());
    let attach: Vec<&Command> = cmds
        .iter()
        .filter(|c| matches!(c, Command::Attach { chat, .. } if chat == "chat-old-1"))
        .collect();
    assert_eq!(attach.len(), 1, "{cmds:?}");
    let Command::Attach {
        history, legacy, ..
    } = attach[0]
    else {
        unreachable!()
    };
    assert_eq!(
        history,
        &[
            Exchange {
                calls: Vec::new(),
                media: Vec::new(),
                user: "Hi".into(),
                answer: "Hello!".into()
            },
            Exchange {
                calls: Vec::new(),
                media: Vec::new(),
                user: "Bye".into(),
                answer: String::new()
            },
        ]
    );
    assert_eq!(
        legacy,
        &Some(LegacyConvo {
            ids: vec![2, 10, 11, 12, 13],
            header: 0,
            last_answer: Some(3),
        })
    );
    let saved = serde_json::to_value(app.saved(0)).expect("json");
    // Saved again in the current format: the transcript became a tree of one path.
    assert_eq!(saved["version"], gemma_app::chats::VERSION);
    assert_eq!(saved["messages"][1]["parent"], saved["messages"][0]["id"]);
    assert!(saved.get("branches").is_none(), "{saved}");
    assert!(saved.get("ids").is_none(), "{saved}");
    assert_eq!(saved["messages"].as_array().map(Vec::len), Some(4));
    // A new tab is attached under its own name, with nothing to bring back.
    let new = app.update(ctrl('t'));
    assert!(
        new.iter().any(
            |c| matches!(c, Command::Attach { history, legacy: None, .. } if history.is_empty())
        ),
        "{new:?}"
    );
}

/// The engine stopping mid-turn ends the turn visibly, and the app still quits (and saves).
#[test]
fn an_engine_that_stops_mid_turn_leaves_the_app_usable() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Hello");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Hi".into(),
    }));
    app.update(Msg::Engine(Event::EngineStopped {
        error: "the engine stopped on an internal error (x)".into(),
    }));
    let t = app.tab().expect("tab");
    assert!(!t.phase.busy(), "the turn ended");
    assert!(t.failed);
    assert!(
        app.last_error
            .as_deref()
            .is_some_and(|e| e.contains("internal error"))
    );
    app.update(ctrl('q'));
    assert!(app.quit, "Ctrl+Q still quits");
}

/// With more tabs than the bar can show, the active one is always in view.
#[test]
fn the_tab_bar_scrolls_to_the_active_tab() {
    let (mut app, _) = new_app();
    ready(&mut app);
    for _ in 0..49 {
        app.update(ctrl('t'));
    }
    let bar = |app: &mut App| {
        let term = draw(app, 80, 12);
        let buf = term.backend().buffer().clone();
        (0..80u16)
            .map(|x| buf[(x, 0)].symbol().to_string())
            .collect::<String>()
    };
    let line = bar(&mut app);
    assert!(line.contains("50 chat 50"), "{line}");
    assert!(line.starts_with("‹"), "{line}");
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('1'),
        KeyModifiers::ALT,
    )));
    let line = bar(&mut app);
    assert!(line.contains("1 chat 1"), "{line}");
}

/// An empty tab leaves no chat file, and empty chats of earlier releases do not come back.
#[test]
fn empty_tabs_are_not_kept() {
    use gemma_app::chats::{SaveJob, SavedChat};
    let (mut app, _) = new_app();
    ready(&mut app);
    app.save_all();
    let jobs = app.take_saves();
    assert!(
        jobs.iter().all(|j| matches!(j, SaveJob::Remove(_))),
        "{jobs:?}"
    );
    let empty: SavedChat = serde_json::from_str(
        r#"{"version":2,"order":0,"title":"e","model":"m","thinking":false,"messages":[]}"#,
    )
    .expect("parses");
    let (mut app, _) = new_app();
    app.restore(vec![("chat-empty".into(), empty)], Vec::new());
    assert!(app.tabs.iter().all(|t| t.uid != "chat-empty"));
}

/// A remote server lost mid-answer: what came stays, marked as cut off, with the error below it
/// saying what to do.
#[test]
fn an_answer_cut_off_by_a_lost_server_is_kept_and_marked() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Tell me about lighthouses.");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Lighthouses guide ships along".into(),
    }));
    app.update(Msg::Engine(Event::Failed {
        tab,
        error: "the connection to http://10.0.0.5:8080 was lost mid-answer (connection reset); \
                what came is kept. Send again when the server is back"
            .into(),
    }));
    insta::assert_snapshot!(draw(&mut app, 80, 16).backend());
}

/// `/system TEXT`: the prompt is the transcript's first message, the engine gets it, a chat with
/// turns says the next one starts over; the saved chat keeps it and a restore sends it before the
/// chat is attached; `/system` alone removes it.
#[test]
fn the_system_prompt_is_shown_first_sent_and_saved() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Hi");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "Hello!".into(),
    }));
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(1),
        stats: stats(0, 10, 2),
    }));
    type_text(&mut app, "/system You are a terse pirate.");
    let cmds = app.update(key(KeyCode::Enter));
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    let system = common::configured(&cmds, tab).and_then(|s| s.system.clone());
    assert_eq!(system.as_deref(), Some("You are a terse pirate."));
    insta::assert_snapshot!(draw(&mut app, 80, 20).backend());
    let saved = app.saved(0);
    assert_eq!(saved.messages[0].role, "system");
    // A restore sets the prompt before attaching the chat.
    let (mut again, _) = new_app();
    let cmds = again.restore(vec![("chat-1".into(), saved)], Vec::new());
    let set = cmds
        .iter()
        .position(|c| matches!(c, Command::Configure { settings, .. } if settings.system.as_deref() == Some("You are a terse pirate.")))
        .expect("the prompt is sent");
    let attach = cmds
        .iter()
        .position(|c| matches!(c, Command::Attach { history, .. } if history.len() == 1))
        .expect("attached with one exchange");
    assert!(set < attach, "{cmds:?}");
    type_text(&mut app, "/system");
    let cmds = app.update(key(KeyCode::Enter));
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    assert_eq!(
        common::configured(&cmds, tab).map(|s| s.system.clone()),
        Some(None)
    );
    assert_eq!(app.tab().and_then(|t| t.system()), None);
}

/// `/export json PATH` hands the tab's chat, as JSON, to the saver; `/export` alone writes
/// Markdown named after the tab, numbered when that name is taken; a PATH that exists is left
/// alone, and said so.
#[test]
fn export_queues_the_tabs_chat() {
    use gemma_app::chats::SaveJob;
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Hi");
    app.update(Msg::Engine(Event::Finished {
        tab,
        end: TurnEnd::EndOfTurn(1),
        stats: stats(0, 10, 0),
    }));
    app.take_saves();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out.json");
    type_text(&mut app, &format!("/export json {}", out.display()));
    app.update(key(KeyCode::Enter));
    match app.take_saves().as_slice() {
        [SaveJob::Export(path, text)] => {
            assert_eq!(path, &out);
            assert!(text.contains("\"text\": \"Hi\""), "{text}");
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(&out, "mine").expect("write");
    type_text(&mut app, &format!("/export json {}", out.display()));
    app.update(key(KeyCode::Enter));
    assert!(
        app.take_saves().is_empty(),
        "an existing file is not replaced"
    );
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.contains("exists"), "{flash}");
    type_text(&mut app, "/export");
    app.update(key(KeyCode::Enter));
    let first = match app.take_saves().as_slice() {
        [SaveJob::Export(path, text)] => {
            assert!(text.starts_with("# chat 1\n"), "{text}");
            path.clone()
        }
        other => panic!("{other:?}"),
    };
    // Whatever the working directory holds, the default name is one that is free.
    assert!(first.to_string_lossy().starts_with("chat-1"), "{first:?}");
    assert!(
        std::fs::symlink_metadata(&first).is_err(),
        "{first:?} is free"
    );
}

/// `/preset NAME` gives the tab the preset's system prompt, sampling and answer length at once
/// (F4 shows which preset); new tabs take `ui.default_preset`; an unknown name says which exist.
#[test]
fn presets_set_a_tab_up_at_once() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let mut config = Config::builtin().expect("config");
    config.presets.insert(
        "coder".into(),
        gemma_app::config::Preset {
            system: Some("Answer with code first.".into()),
            temperature: Some(0.2),
            max_new_tokens: Some(2048),
            ..Default::default()
        },
    );
    app.config = Some(Box::new(config.clone()));
    type_text(&mut app, "/preset coder");
    let cmds = app.update(key(KeyCode::Enter));
    assert_eq!(cmds.len(), 1, "one command: {cmds:?}");
    let s = common::configured(&cmds, 1).expect("told");
    assert_eq!(s.system.as_deref(), Some("Answer with code first."));
    assert_eq!(s.sampling.temperature, 0.2);
    assert_eq!(s.max_new_tokens, 2048);
    app.update(key(KeyCode::F(4)));
    insta::assert_snapshot!(draw(&mut app, 80, 20).backend());
    app.update(key(KeyCode::Esc));
    type_text(&mut app, "/preset nope");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.flash.as_deref(), Some("no preset \"nope\": try coder"));
    // A new tab takes the default preset, quietly.
    config.ui.default_preset = "coder".into();
    app.config = Some(Box::new(config));
    let cmds = app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('t'),
        KeyModifiers::CONTROL,
    )));
    let system = common::configured(&cmds, 2).and_then(|s| s.system.clone());
    assert!(system.is_some(), "{cmds:?}");
    let t = app.tab().expect("tab");
    assert_eq!(t.preset.as_deref(), Some("coder"));
    assert_eq!(t.messages.len(), 1, "the system prompt, no notice");
}

/// Ctrl+F searches every tab as you type (the active tab's hits first); Enter opens the hit's
/// tab with the message at the top of the view, marked.
#[test]
fn search_finds_a_message_in_another_tab_and_opens_it() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let first = send(&mut app, "Tell me about lighthouses.");
    app.update(Msg::Engine(Event::Token {
        tab: first,
        text: "A lighthouse guides ships.".into(),
    }));
    app.update(Msg::Engine(Event::Finished {
        tab: first,
        end: TurnEnd::EndOfTurn(1),
        stats: stats(0, 10, 4),
    }));
    for n in 0..12 {
        let m = gemma_app::app::tab::Message::new(
            gemma_app::app::tab::Role::Notice,
            format!("filler line {n}"),
        );
        app.tabs[0].push(m);
    }
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('t'),
        KeyModifiers::CONTROL,
    )));
    let second = send(&mut app, "What about the LIGHTHOUSE of Alexandria?");
    app.update(Msg::Engine(Event::Finished {
        tab: second,
        end: TurnEnd::EndOfTurn(1),
        stats: stats(0, 10, 0),
    }));
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('f'),
        KeyModifiers::CONTROL,
    )));
    type_text(&mut app, "lighthouse");
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Down));
    insta::assert_snapshot!("search_overlay", draw(&mut app, 80, 16).backend());
    app.update(key(KeyCode::Enter));
    assert_eq!(app.active, 0, "the hit's tab");
    insta::assert_snapshot!("search_opens_the_hit", draw(&mut app, 80, 16).backend());
}

fn alt(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::ALT))
}

fn answer(app: &mut App, tab: TabId, text: &str, stats: TurnStats) {
    app.update(Msg::Engine(Event::Token {
        tab,
        text: text.into(),
    }));
    finish(app, tab, TurnEnd::EndOfTurn(106), stats);
}

fn exchange(user: &str, answer: &str) -> gemma_protocol::Exchange {
    gemma_protocol::Exchange {
        calls: Vec::new(),
        media: Vec::new(),
        user: user.into(),
        answer: answer.into(),
    }
}

/// Edit an earlier message, switch its versions ‹n/m›, regenerate as a new version and copy the
/// path into a new tab: what the screen shows and what the engine is told.
#[test]
fn the_version_switcher_edits_switches_and_branches() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Hi");
    answer(&mut app, tab, "Hello", stats(0, 9, 1));
    send(&mut app, "Tell me a joke");
    answer(&mut app, tab, "No.", stats(10, 8, 2));
    // Select the second message (Alt+Up twice) and edit it.
    app.update(alt(KeyCode::Up));
    app.update(alt(KeyCode::Up));
    assert_eq!(app.tab().expect("tab").selected, Some(2));
    insta::assert_snapshot!(
        "version_switcher_selected",
        draw(&mut app, 60, 16).backend()
    );
    assert!(app.update(key(KeyCode::Enter)).is_empty());
    assert_eq!(app.tab().expect("tab").editor.text(), "Tell me a joke");
    for _ in "joke".chars() {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, "pun");
    let cmds = app.update(key(KeyCode::Enter));
    assert_eq!(
        cmds,
        vec![
            Command::SetPath {
                tab,
                history: vec![exchange("Hi", "Hello")],
            },
            Command::Submit {
                tab,
                text: "Tell me a pun".into(),
                images: Vec::new(),
            },
        ]
    );
    let mut rewound = stats(12, 7, 3);
    rewound.reuse = Reuse::Rewind;
    answer(&mut app, tab, "Puns are fun.", rewound);
    insta::assert_snapshot!("version_switcher_edited", draw(&mut app, 60, 16).backend());
    // Back to version 1 of that message: its old answer comes back with it.
    let cmds = app.update(alt(KeyCode::Char(',')));
    assert_eq!(
        cmds,
        vec![Command::SetPath {
            tab,
            history: vec![exchange("Hi", "Hello"), exchange("Tell me a joke", "No.")],
        }]
    );
    app.update(Msg::Engine(Event::Rebased {
        tab,
        tokens: 21,
        common: 14,
    }));
    insta::assert_snapshot!(
        "version_switcher_switched",
        draw(&mut app, 150, 16).backend()
    );
    // Regenerate keeps the old answer as another version.
    assert_eq!(app.update(ctrl('r')), vec![Command::Regenerate { tab }]);
    answer(&mut app, tab, "Yes.", stats(20, 1, 2));
    let t = app.tab().expect("tab");
    let last = t.messages.last().expect("answer");
    assert_eq!((last.text.as_str(), last.versions), ("Yes.", Some((2, 2))));
    // Saved as a tree, it comes back as one.
    let saved = app.saved(app.active);
    assert_eq!(saved.version, gemma_app::chats::VERSION);
    assert_eq!(saved.branches.len(), 2, "{saved:?}");
    assert_eq!(saved.messages[1].parent, Some(saved.messages[0].id));
    // Copy the path into a new tab: it starts from this tab's session.
    let cmds = app.update(alt(KeyCode::Char('b')));
    let new = app.tab().expect("new tab").id;
    assert_ne!(new, tab);
    assert!(cmds.contains(&Command::Fork {
        tab: new,
        from: tab,
        history: vec![exchange("Hi", "Hello"), exchange("Tell me a joke", "Yes.")],
    }));
    assert_eq!(app.tab().expect("tab").messages.len(), 4);
    // From a selected message of the user's: the path before it, and it in the input.
    app.update(alt(KeyCode::Char('1')));
    app.update(alt(KeyCode::Up));
    app.update(alt(KeyCode::Up));
    let cmds = app.update(key(KeyCode::Char('b')));
    let new = app.tab().expect("new tab");
    assert_eq!(new.messages.len(), 2);
    assert_eq!(new.editor.text(), "Tell me a joke");
    assert!(cmds.contains(&Command::Fork {
        tab: new.id,
        from: tab,
        history: vec![exchange("Hi", "Hello")],
    }));
}

/// A click on the transcript selects the message under it (the view does not move).
#[test]
fn a_click_selects_the_message_under_it() {
    use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Hi");
    answer(&mut app, tab, "Hello", stats(0, 9, 1));
    draw(&mut app, 60, 16);
    let click = |row| {
        Msg::Mouse(MouseEvent {
            kind: MouseEventKind::Down(MouseButton::Left),
            column: 3,
            row,
            modifiers: KeyModifiers::NONE,
        })
    };
    // Row 0 is the tab bar; the transcript's lines start at row 1: You, Hi, -, Gemma, Hello.
    app.update(click(2));
    assert_eq!(app.tab().expect("tab").selected, Some(0));
    app.update(click(5));
    assert_eq!(app.tab().expect("tab").selected, Some(1));
    assert!(
        draw(&mut app, 60, 16)
            .backend()
            .to_string()
            .contains("Gemma ◀ selected")
    );
    app.update(click(0));
    assert_eq!(
        app.tab().expect("tab").selected,
        Some(1),
        "the tab bar is not the transcript"
    );
    app.update(key(KeyCode::Esc));
    assert_eq!(app.tab().expect("tab").selected, None);
}

/// A closed tab's chat is searched too: Enter reopens it as a tab at the message found, its
/// file moved back from `closed/`, and the engine told to attach it with its history.
#[test]
fn search_finds_a_closed_chat_and_reopens_it() {
    use gemma_app::chats::SaveJob;
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Where do puffins nest?");
    answer(&mut app, tab, "On cliffs.", stats(0, 8, 2));
    let uid = app.tab().expect("tab").uid.clone();
    app.update(ctrl('w'));
    assert!(app.tabs.iter().all(|t| t.id != tab), "closed");
    app.take_saves();
    app.update(ctrl('f'));
    type_text(&mut app, "PUFFIN");
    insta::assert_snapshot!("search_closed_chat", draw(&mut app, 80, 12).backend());
    let cmds = app.update(key(KeyCode::Enter));
    let t = app.tab().expect("reopened");
    assert_eq!((t.uid.as_str(), t.focus), (uid.as_str(), Some(0)));
    assert!(
        cmds.iter().any(|c| matches!(
            c,
            Command::Attach { chat, history, .. } if *chat == uid && history.len() == 1
        )),
        "{cmds:?}"
    );
    assert!(
        app.take_saves()
            .iter()
            .any(|j| matches!(j, SaveJob::Reopen(u) if *u == uid))
    );
    assert!(app.closed.is_empty());
}

#[test]
fn pictures_are_attached_shown_removed_and_sent() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let pictures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vision/e2b_style");
    let a = pictures.join("a.png");
    // A bad budget and a file that is neither a picture nor text that fits change nothing.
    type_text(&mut app, "/image-tokens 100");
    app.update(key(KeyCode::Enter));
    assert!(
        app.flash
            .as_deref()
            .is_some_and(|f| f.contains("70, 140, 280"))
    );
    type_text(
        &mut app,
        &format!("/attach {}", pictures.join("model.safetensors").display()),
    );
    app.update(key(KeyCode::Enter));
    assert!(
        app.flash
            .as_deref()
            .is_some_and(|f| f.starts_with("cannot attach"))
    );
    // Attached, shown in the input, removed, attached again by a pasted path.
    type_text(&mut app, &format!("/attach {}", a.display()));
    app.update(key(KeyCode::Enter));
    let screen = format!("{:?}", draw(&mut app, 100, 20).backend().buffer());
    assert!(screen.contains("[img a.png 150×100 · 260 tok]"), "{screen}");
    type_text(&mut app, "/detach");
    app.update(key(KeyCode::Enter));
    assert!(app.tab().is_some_and(|t| t.attachments.is_empty()));
    app.update(Msg::Paste(format!("'{}'\n", a.display())));
    assert_eq!(app.tab().map(|t| t.attachments.len()), Some(1));
    assert_eq!(app.tab().map(|t| t.editor.text()), Some(String::new()));
    // Sent with the message, shown on it, gone from the input.
    type_text(&mut app, "What is it?");
    let cmds = app.update(key(KeyCode::Enter));
    match cmds.as_slice() {
        [Command::Submit { images, text, .. }] => {
            assert_eq!(text, "What is it?");
            assert_eq!(images.len(), 1);
            assert_eq!(images[0].path, a);
            assert_eq!(images[0].tokens, 280);
        }
        other => panic!("expected one submit, got {other:?}"),
    }
    let t = app.tab().expect("tab");
    assert!(t.attachments.is_empty());
    let last = t.messages.last().expect("the message");
    assert_eq!(last.images[0].label(), "[img a.png 150×100 · 260 tok]");
    // Editing the message brings its picture back to the input; cancelling drops it.
    let tab = t.id;
    answer(&mut app, tab, "A square.", stats(0, 280, 3));
    app.update(alt(KeyCode::Up));
    app.update(alt(KeyCode::Up));
    app.update(key(KeyCode::Enter));
    let t = app.tab().expect("tab");
    assert_eq!((t.editing.is_some(), t.attachments.len()), (true, 1));
    app.update(key(KeyCode::Esc));
    assert!(app.tab().is_some_and(|t| t.attachments.is_empty()));
}

#[test]
fn what_speculation_did_is_on_the_answer_and_the_status_line() {
    let (mut app, _) = new_app();
    ready(&mut app);
    let tab = send(&mut app, "Copy it out again.");
    app.update(Msg::Engine(Event::Token {
        tab,
        text: "fn checksum() {}".into(),
    }));
    let spec = gemma_protocol::SpecStats {
        drafted: 40,
        accepted: 30,
        steps: 10,
        tokens: 40,
        off: false,
    };
    let stats = TurnStats {
        speculation: Some(spec),
        ..stats(0, 12, 41)
    };
    finish(&mut app, tab, TurnEnd::EndOfTurn(1), stats);
    let footer = app.tab().and_then(|t| t.messages.last()?.footer.clone());
    assert!(
        footer
            .as_deref()
            .is_some_and(|f| f.ends_with(" · spec 75% · 4.0 tokens/step")),
        "{footer:?}"
    );
    let screen = format!("{:?}", draw(&mut app, 160, 20).backend().buffer());
    assert!(screen.contains(" spec 75% · 4.0 tokens/step "), "{screen}");
}
