//! What the app's screen tests share: a real `App` on the built-in config with the demo model's
//! state, and keys typed into it.
// Each test file uses its own subset.
#![allow(dead_code)]

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use gemma_app::app::{App, Loading, ModelState, Msg, TurnSettings};
use gemma_app::config::Config;
use gemma_app::config::keymap::Keymap;
use gemma_app::config::sampling::{SamplingLayer, Source};
use gemma_protocol::{Command, TabSettings};

/// A new app (dark theme, 8192-token context, 256-token answers) whose config file's sampling
/// is `file`, with the commands its first tab sends.
pub fn app(file: SamplingLayer) -> (App, Vec<Command>) {
    let config = Config::builtin().expect("config");
    let keymap = Keymap::from_config(&config.ui.keys).expect("keys");
    let model = ModelState {
        name: "gemma-3-270m (demo)".into(),
        backend: "cpu".into(),
        context_limit: 8192,
        thinking: false,
        loading: Loading::default(),
        load_error: None,
        ready: false,
        template_fallback: false,
    };
    let settings = TurnSettings {
        layers: vec![(Source::File, file)],
        model: SamplingLayer::default(),
        random_seed: 1,
        max_new_tokens: 256,
        stop: Vec::new(),
        thinking: Default::default(),
        thinking_budgets: Default::default(),
        context_length: None,
        overflow: gemma_protocol::Overflow {
            mode: gemma_protocol::OverflowMode::Compact,
            ..Default::default()
        },
        speculation: Default::default(),
    };
    App::new(
        model,
        keymap,
        gemma_app::config::Theme::Dark,
        settings,
        false,
    )
}

/// A key press without modifiers.
pub fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

/// Types `text` into the input, with the commands that sends.
pub fn type_text(app: &mut App, text: &str) -> Vec<Command> {
    text.chars()
        .flat_map(|c| app.update(key(KeyCode::Char(c))))
        .collect()
}

/// [`app`] with default sampling, its model loaded (Gemma 3, no thinking, 8192 tokens).
pub fn ready_app() -> App {
    let (mut app, _) = app(SamplingLayer::default());
    app.update(Msg::Engine(gemma_protocol::Event::Ready {
        model: "gemma3_text".into(),
        context_length: 8192,
        thinking: false,
        tool_calls: false,
        generation: SamplingLayer::default(),
    }));
    app
}

/// The screen `w`×`h` at `now` (a fixed clock keeps tok/s stable), drawn with a fresh view each
/// time: the renderer's cache must not change what is drawn.
pub fn draw_at(
    app: &mut App,
    w: u16,
    h: u16,
    now: std::time::Instant,
) -> ratatui::Terminal<ratatui::backend::TestBackend> {
    app.update(Msg::Resize(w, h));
    app.update(Msg::Tick(now));
    let backend = ratatui::backend::TestBackend::new(w, h);
    let mut t = ratatui::Terminal::new(backend).expect("terminal");
    let mut measured = None;
    t.draw(|f| measured = gemma_app::ui::render(f, app, &mut gemma_app::ui::view::View::default()))
        .expect("draw");
    if let Some(m) = measured {
        app.measured(m);
    }
    t
}

/// [`draw_at`] now.
pub fn draw(app: &mut App, w: u16, h: u16) -> ratatui::Terminal<ratatui::backend::TestBackend> {
    draw_at(app, w, h, std::time::Instant::now())
}

/// The settings `cmds` give `tab` (the last `Configure` for it), if any.
pub fn configured(cmds: &[Command], tab: gemma_protocol::TabId) -> Option<&TabSettings> {
    cmds.iter().rev().find_map(|c| match c {
        Command::Configure { tab: t, settings } if *t == tab => Some(&**settings),
        _ => None,
    })
}
