//! `gemma-chat` in a terminal: the config and flags resolved into the app's settings, the engine
//! started on its thread (fetching the demo model there when no model is named), and the UI run
//! until it quits.

use gemma_app::app::{App, Loading, ModelState};
use gemma_app::chats::load_chats;
use gemma_app::config::keymap::Keymap;
use gemma_app::config::{Config, config_path};
use gemma_app::tui;
use gemma_model::demo;

use super::front::{engine_options, spawn_engine, turn_settings};
use super::tools::start_tools;
use super::{ModelArgs, SamplingArgs};

/// Runs the terminal UI. `max_new` and `sampling` are the command-line overrides.
pub fn run(
    common: &ModelArgs,
    config: Config,
    max_new: Option<usize>,
    sampling: &SamplingArgs,
) -> anyhow::Result<()> {
    let choice = common.choice(&config)?;
    let remote = common.remote(&config)?;
    let keymap = Keymap::from_config(&config.ui.keys)?;
    let settings = turn_settings(&config, sampling, max_new);
    let name = match (&remote, &choice.model) {
        // The server names its model when it is reached.
        (Some(_), _) => String::new(),
        (None, Some(p)) => p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        (None, None) => "gemma-3-270m (demo)".to_string(),
    };
    let model = ModelState {
        name,
        backend: if remote.is_some() {
            "remote".into()
        } else {
            choice.backend.to_string()
        },
        context_limit: config.model.context_length,
        thinking: false,
        loading: Loading::default(),
        load_error: None,
        ready: false,
        template_fallback: false,
    };
    let data = demo::data_dir()?;
    // One instance per data dir: two would overwrite each other's chats.
    let _lock = gemma_files::DirLock::acquire(&data)?;
    let mut options = engine_options(&config, Some(&data));
    // The servers start in the background; the engine reports them as they come.
    options.tools = start_tools(&config)?.map(|t| t.shared());
    let engine = spawn_engine(choice, remote, options);
    let (mut app, initial) = App::new(
        model,
        keymap,
        config.ui.theme,
        settings,
        config.ui.show_thoughts,
    );
    app.config = Some(Box::new(config));
    let mut initial = initial;
    initial.extend(app.apply_default_tools());
    initial.extend(app.apply_default_preset());
    let chats = data.join("chats");
    let keep_closed = app
        .config
        .as_ref()
        .map_or(0, |c| c.sessions.keep_closed_days);
    gemma_app::chats::prune_closed(&chats, keep_closed);
    let (saved, warnings) = load_chats(&chats);
    initial.extend(app.restore(saved, warnings));
    app.closed = gemma_app::chats::load_closed(&chats);
    let path = config_path(common.config.as_deref());
    if let Some(signal) = tui::run(app, initial, engine, path.as_deref(), chats)? {
        // Ended by a signal, everything saved: the shell sees 128 + its number.
        drop(_lock);
        std::process::exit(128 + signal);
    }
    Ok(())
}
