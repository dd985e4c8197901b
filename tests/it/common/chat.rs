//! An engine on a copy of a Gemma 4 oracle fixture with the tiny Gemma 4 tokenizer: what the
//! chat-level tests (history against the template, branches) start from.

use std::path::{Path, PathBuf};
use std::time::Duration;

use burn::tensor::Device;
use gemma_engine::convo_store::ConvoStore;
use gemma_engine::kv_store::fingerprint;
use gemma_engine::protocol::{Attachment, Command, Event, TabId, TabSettings};
use gemma_engine::{EngineHandle, EngineOptions, spawn};
use gemma_model::checkpoint::load;
use gemma_model::model::ComputeDtype;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A copy of a Gemma 4 oracle fixture with the tiny Gemma 4 tokenizer and, if given, a
/// `chat_template.jinja`.
pub fn fixture(name: &str, template: Option<&str>) -> tempfile::TempDir {
    fixture_at(&root().join("tests/fixtures/oracle").join(name), template)
}

/// [`fixture`] of the checkpoint in `from` (its files, not its folders).
pub fn fixture_at(from: &Path, template: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(from).expect("fixture") {
        let p = e.expect("entry").path();
        let n = p.file_name().expect("name").to_string_lossy().into_owned();
        if !n.starts_with("reference") && p.is_file() {
            std::fs::copy(&p, dir.path().join(&n)).expect("copy");
        }
    }
    std::fs::copy(
        root().join("tests/fixtures/tiny_chat_gemma4/tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .expect("tokenizer");
    if let Some(t) = template {
        std::fs::copy(root().join(t), dir.path().join("chat_template.jinja")).expect("template");
    }
    dir
}

/// Where the engine saves the conversations of the fixture copy in `dir`.
pub fn convos(dir: &Path) -> PathBuf {
    dir.join("conversations")
}

/// The engine's saved conversations for the model in `dir`.
pub fn store(dir: &Path) -> ConvoStore {
    ConvoStore::new(convos(dir), fingerprint(dir))
}

/// An engine on the fixture copy in `dir`, loaded and ready, saving conversations beside it.
pub fn engine(dir: &Path) -> EngineHandle {
    let path: PathBuf = dir.to_path_buf();
    let options = EngineOptions {
        convo_dir: Some(convos(dir)),
        ..EngineOptions::default()
    };
    let h = spawn(options, move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    });
    match first_after_loading(&h) {
        Event::Ready { thinking, .. } => {
            assert!(
                thinking,
                "the tiny Gemma 4 tokenizer has the thinking tokens"
            );
            h
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// The first event after the loading progress.
pub fn first_after_loading(h: &EngineHandle) -> Event {
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("loads")
        {
            Event::Loading { .. } => {}
            other => return other,
        }
    }
}

/// The chat tab `tab` is attached to.
pub fn chat(tab: TabId) -> String {
    format!("tab-{tab}")
}

/// Attaches `tab` to its chat, greedy, answers of at most 6 tokens.
pub fn open(h: &EngineHandle, tab: TabId) {
    h.send(Command::Attach {
        tab,
        chat: chat(tab),
        history: Vec::new(),
        legacy: None,
    });
    configure(h, tab, short_answers());
}

/// What [`open`] gives a tab: greedy, answers of at most 6 tokens, the rest as a new tab's.
pub fn short_answers() -> TabSettings {
    TabSettings {
        max_new_tokens: 6,
        ..TabSettings::default()
    }
}

/// Gives `tab` these settings, whole.
pub fn configure(h: &EngineHandle, tab: TabId, settings: TabSettings) {
    h.send(Command::Configure {
        tab,
        settings: Box::new(settings),
    });
}

/// A finished turn: its answer, its numbers and the notices it gave.
pub struct Done {
    /// The answer's text as streamed.
    pub answer: String,
    /// The turn's numbers.
    pub stats: gemma_engine::protocol::TurnStats,
    /// The tab's notices during the turn.
    pub notices: Vec<String>,
}

/// Sends `text` with `images` in `tab` and waits for the turn to finish (a failure panics).
pub fn submit(h: &EngineHandle, tab: TabId, text: &str, images: Vec<Attachment>) -> Done {
    h.send(Command::Submit {
        tab,
        text: text.into(),
        images,
    });
    let (mut answer, mut notices) = (String::new(), Vec::new());
    loop {
        match h
            .events
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("an event")
        {
            Event::Token { tab: t, text } if t == tab => answer.push_str(&text),
            Event::Notice { tab: t, text } if t == tab => notices.push(text),
            Event::Finished { tab: t, stats, .. } if t == tab => {
                return Done {
                    answer,
                    stats,
                    notices,
                };
            }
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
}
