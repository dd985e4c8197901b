//! A conversation with a recording and tool calls, rebuilt from its transcript (issue 58): an
//! import (or a restart without the engine's copy) and a branch to a path not run in this
//! process write each call as the model wrote it, where it made it, with the response it read
//! (fitted as the live turn fitted it), so the model reads the live conversation again; a slide
//! keeps its exchanges' calls. Compared as text with every control token in its place and each
//! response block id for id (a sampled answer's text is tokenized afresh, as any rebuilt answer
//! is).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gemma_app::app::tools::ToolRun;
use gemma_engine::EngineHandle;
use gemma_engine::convo_store::SavedConvo;
use gemma_engine::protocol::{
    Attachment, Command, Event, Exchange, Overflow, OverflowMode, Speculate, Speculation, TabId,
    TabSettings, ToolChoice, ToolDecision, ToolSelection,
};
use gemma_model::tokenizer::Tokenizer;
use gemma_tools::config::Limits;
use gemma_tools::host::ToolHost;

use crate::audio_chat::clip;
use crate::common::chat::{chat, configure, convos, fixture_at, root, store};
use crate::common::mcp;

const OFFICIAL: &str = "tests/fixtures/templates/official/gemma4-31b-it.jinja";

/// The tiny audio checkpoint with the official template (it declares and writes tool calls).
fn audio_dir() -> tempfile::TempDir {
    fixture_at(
        &root().join("tests/fixtures/audio/e2b_style"),
        Some(OFFICIAL),
    )
}

fn host(dir: &Path) -> Arc<ToolHost> {
    let limits = Limits {
        max_call_tokens: 24,
        ..Limits::default()
    };
    mcp::host(&dir.join("calls.jsonl"), limits)
}

/// An engine on `dir` with `host`'s tools, saving conversations beside it.
fn engine(dir: &Path, host: Arc<ToolHost>) -> EngineHandle {
    mcp::engine_with_tools(dir, host, Some(convos(dir)))
}

/// Greedy, every turn calling `forecast` (required), answers of at most 40 tokens.
fn settings(context: Option<usize>) -> TabSettings {
    TabSettings {
        max_new_tokens: 40,
        tools: ToolSelection::Only(vec!["test.forecast".into()]),
        tool_choice: ToolChoice::Required,
        context,
        ..TabSettings::default()
    }
}

fn attach(h: &EngineHandle, tab: TabId, history: Vec<Exchange>) {
    h.send(Command::Attach {
        tab,
        chat: chat(tab),
        history,
        legacy: None,
    });
}

/// Sends `text` with `media` and follows the turn, running each call once: the exchange as the
/// app's transcript keeps it (its calls through the app's own [`ToolRun`]).
fn turn(h: &EngineHandle, tab: TabId, text: &str, media: Vec<Attachment>) -> Exchange {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images: media.clone(),
    });
    let (mut answer, mut runs) = (String::new(), Vec::<ToolRun>::new());
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("goes on")
        {
            Event::Token { text, .. } => answer.push_str(&text),
            Event::ToolCall { call, approval, .. } => {
                if approval {
                    let decision = ToolDecision::Once;
                    let call = call.id;
                    h.send(Command::DecideTool {
                        tab,
                        call,
                        decision,
                    });
                }
                runs.push(ToolRun::new(&call, approval));
            }
            Event::ToolResult { outcome, .. } => {
                let run = runs
                    .iter_mut()
                    .find(|r| r.id == outcome.id)
                    .expect("its call");
                run.finish(&outcome);
            }
            Event::Finished { .. } => break,
            Event::Failed { error, .. } => panic!("the turn failed: {error}"),
            _ => {}
        }
    }
    Exchange {
        user: text.into(),
        media,
        answer,
        calls: runs.iter().map(ToolRun::made).collect(),
    }
}

/// The saved conversation of tab 1 after `h` shuts down.
fn saved(h: EngineHandle, dir: &Path) -> SavedConvo {
    h.send(Command::Shutdown);
    drop(h);
    store(dir).load(&chat(1)).expect("saved")
}

/// The conversation up to where the follow-up's answer starts.
fn before_follow_up(c: &SavedConvo) -> &[u32] {
    &c.ids[..1 + c.header + c.exchanges[1][0]]
}

/// `a` and `b` say the same: the same text, every control token in the same order, and each
/// tool response block the same ids.
fn same_conversation(tok: &Tokenizer, a: &[u32], b: &[u32]) {
    let text = |ids: &[u32]| tok.decode(ids, false).expect("decodes");
    assert_eq!(text(a), text(b));
    let bytes = tok.vocab_bytes();
    let control = |ids: &[u32]| -> Vec<u32> {
        let is = |id: &&u32| bytes.get(**id as usize).is_none_or(Option::is_none);
        ids.iter().filter(is).copied().collect()
    };
    assert_eq!(control(a), control(b));
    let (open, close) = (
        tok.token_id("<|tool_response>").expect("marker"),
        tok.token_id("<tool_response|>").expect("marker"),
    );
    let blocks = |ids: &[u32]| -> Vec<Vec<u32>> {
        let mut out: Vec<Vec<u32>> = Vec::new();
        let mut inside = false;
        for &id in ids {
            match id {
                _ if id == open => {
                    inside = true;
                    out.push(Vec::new());
                }
                _ if id == close => inside = false,
                _ if inside => out.last_mut().expect("opened").push(id),
                _ => {}
            }
        }
        out
    };
    let (ra, rb) = (blocks(a), blocks(b));
    assert!(!ra.is_empty(), "the conversation holds tool responses");
    assert_eq!(ra, rb);
}

/// The live chat: a recording and a question, a call run, then a follow-up (another call).
fn live() -> (tempfile::TempDir, Exchange, SavedConvo) {
    live_with(Speculate::Off)
}

/// [`live`] with speculative decoding of `kind`.
fn live_with(kind: Speculate) -> (tempfile::TempDir, Exchange, SavedConvo) {
    let dir = audio_dir();
    let h = engine(dir.path(), host(dir.path()));
    attach(&h, 1, Vec::new());
    let speculation = Speculation { kind, draft_max: 8 };
    configure(
        &h,
        1,
        TabSettings {
            speculation,
            ..settings(None)
        },
    );
    let sound = vec![Attachment::audio(clip("a.wav"))];
    let first = turn(&h, 1, "What is the weather where this was recorded?", sound);
    assert!(!first.calls.is_empty(), "{first:?}");
    assert!(
        first
            .calls
            .iter()
            .all(|c| !c.written.is_empty() && c.response.is_some())
    );
    turn(&h, 1, "And tomorrow?", Vec::new());
    let convo = saved(h, dir.path());
    (dir, first, convo)
}

#[test]
fn a_transcript_with_a_recording_and_tool_calls_rebuilds_the_live_conversation() {
    let (live_dir, first, live) = live();
    let tok = Tokenizer::from_file(&live_dir.path().join("tokenizer.json")).expect("tokenizer");
    // Imported (or restarted without the engine's copy): the transcript is all it has.
    let dir = audio_dir();
    let h = engine(dir.path(), host(dir.path()));
    attach(&h, 1, vec![first.clone()]);
    configure(&h, 1, settings(None));
    turn(&h, 1, "And tomorrow?", Vec::new());
    let imported = saved(h, dir.path());
    same_conversation(&tok, before_follow_up(&live), before_follow_up(&imported));
    assert_eq!(
        imported.pictures, live.pictures,
        "the recording's places and keys"
    );
    // Without its calls (what happened before) the model reads another conversation.
    let dir = audio_dir();
    let h = engine(dir.path(), host(dir.path()));
    let bare = Exchange {
        calls: Vec::new(),
        ..first.clone()
    };
    attach(&h, 1, vec![bare]);
    configure(&h, 1, settings(None));
    turn(&h, 1, "And tomorrow?", Vec::new());
    let without = saved(h, dir.path());
    let text = |c: &SavedConvo| tok.decode(before_follow_up(c), false).expect("decodes");
    assert_ne!(text(&without), text(&live));
    // A branch to that path from an empty tab, on another engine.
    let dir = audio_dir();
    let h = engine(dir.path(), host(dir.path()));
    attach(&h, 1, Vec::new());
    configure(&h, 1, settings(None));
    h.send(Command::SetPath {
        tab: 1,
        history: vec![first],
    });
    turn(&h, 1, "And tomorrow?", Vec::new());
    let branched = saved(h, dir.path());
    same_conversation(&tok, before_follow_up(&live), before_follow_up(&branched));
}

#[test]
fn tool_calls_and_a_recording_speculate_to_the_same_conversation() {
    let (_, first, plain) = live();
    let (_, spec_first, spec) = live_with(Speculate::Lookup);
    assert_eq!(spec_first, first);
    assert_eq!(spec.ids, plain.ids);
    assert_eq!(spec.exchanges, plain.exchanges);
}

#[test]
fn a_slide_keeps_the_calls_of_the_exchanges_it_keeps() {
    let dir = audio_dir();
    let h = engine(dir.path(), host(dir.path()));
    attach(&h, 1, Vec::new());
    let overflow = Overflow {
        mode: OverflowMode::Slide,
        at: 0.9,
        prompt: "Summarize.".into(),
    };
    // Only the second message calls a tool: a slide drops the first (long) and keeps the
    // second.
    let at_turn = |i: usize| TabSettings {
        overflow: overflow.clone(),
        max_new_tokens: 8,
        tool_choice: match i {
            1 => ToolChoice::Required,
            _ => ToolChoice::None,
        },
        // A tool with a short declaration, so that a slide has room to keep its call.
        tools: ToolSelection::Only(vec!["test.env".into()]),
        ..settings(Some(1024))
    };
    let tok = Tokenizer::from_file(&dir.path().join("tokenizer.json")).expect("tokenizer");
    let call = tok.token_id("<|tool_call>").expect("marker");
    for i in 0..8 {
        configure(&h, 1, at_turn(i));
        let text = match i {
            0 => "Tell me of the river and the hill. ".repeat(15),
            _ => format!("Town {i}?"),
        };
        let ex = turn(&h, 1, &text, Vec::new());
        assert_eq!(ex.calls.is_empty(), i != 1, "{ex:?}");
        let c = store(dir.path()).load(&chat(1)).expect("saved");
        let kept = c.exchanges.len();
        if kept < i + 1 {
            assert!(kept >= 2, "the exchange with the call is kept ({kept})");
            // The kept exchanges were written again from their texts: the call with them.
            let calls = c.ids.iter().filter(|&&id| id == call).count();
            assert_eq!(calls, 1, "{}", tok.decode(&c.ids, false).expect("text"));
            return;
        }
    }
    panic!("the conversation never slid");
}
