//! `gemma-chat serve`: loads the model (or connects the configured engine), then serves it
//! behind the OpenAI chat completions API (`gemma-serve`), with the settings a new tab would
//! take as every request's defaults. Stages on stderr, as the headless commands print them.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use gemma_app::app::TabChoices;
use gemma_engine::protocol::ToolChoice;
use gemma_model::demo;
use gemma_serve::ServeOptions;

use super::front::{engine_options, spawn_engine, turn_settings, wait_ready};
use super::{ModelArgs, SamplingArgs};

/// `gemma-chat serve` (each flag over `[serve]` in the config).
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (a non-loopback one needs `[serve] api_key_env`).
    #[arg(long)]
    host: Option<String>,
    /// The port (0: any free one, printed at start).
    #[arg(long)]
    port: Option<u16>,
    /// Conversations kept, one engine tab each (1 to 64).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    slots: Option<u16>,
    /// Answers that run at once (at most the slots).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    parallel: Option<u16>,
}

/// Runs `serve` until the process is stopped or the engine ends.
pub fn run(args: ServeArgs, common: &ModelArgs, sampling: &SamplingArgs) -> anyhow::Result<()> {
    let config = common.config()?;
    let s = &config.serve;
    let api_key = match s.api_key_env.as_str() {
        "" => None,
        name => Some(std::env::var(name).with_context(|| {
            format!(
                "[serve] api_key_env names {name}, which is not set: export it or empty the key"
            )
        })?),
    };
    let remote = common.remote(&config)?;
    let is_remote = remote.is_some();
    let choice = common.choice(&config)?;
    let name = model_name(choice.model.as_deref()).filter(|_| !is_remote);
    let mut settings = turn_settings(&config, sampling, None);
    let sessions = sessions_dir();
    let mut engine_opts = engine_options(&config, None);
    // Conversations that leave their slot are parked here (their ids and KV state), within
    // `[sessions] kv_disk_mb`, and brought back when their client returns.
    engine_opts.kv_dir = Some(sessions.join("kv"));
    engine_opts.convo_dir = Some(sessions.join("conversations"));
    engine_opts.kv_disk_bytes = config.sessions.kv_disk_mb << 20;
    let engine = spawn_engine(choice, remote, engine_opts);
    let ready = wait_ready(&engine)?;
    settings.model = ready.generation;
    let choices = TabChoices::new(&settings, ToolChoice::None);
    let base = settings.tab_settings(&choices, None, ready.thinking);
    let b = config.model.thinking_budgets;
    let options = ServeOptions {
        host: args.host.unwrap_or_else(|| s.host.clone()),
        port: args.port.unwrap_or(s.port),
        slots: args.slots.map_or(s.slots, usize::from),
        parallel: args.parallel.map_or(s.parallel, usize::from),
        queue: s.queue,
        api_key,
        max_body: (s.max_body_mb as usize).saturating_mul(1 << 20),
        max_media: s.max_media,
        // The file's name where there is one (what clients pass as `model`), else the engine's.
        model: name.unwrap_or(ready.model),
        context_length: ready.context_length,
        can_think: ready.thinking,
        can_call_tools: ready.tool_calls,
        budgets: [b.low, b.medium, b.high],
        base,
        media_dir: media_dir(),
        fetch: s
            .fetch_images
            .then(|| fetcher((s.max_body_mb as usize).saturating_mul(1 << 20))),
    };
    let (slots, parallel) = (options.slots, options.parallel.min(options.slots));
    let bound = gemma_serve::bind(options)?;
    eprintln!(
        "gemma-chat serve: http://{} ({slots} conversations kept, {parallel} answered at once): \
         POST /v1/chat/completions, GET /v1/models, GET /health",
        bound.addr()
    );
    let served = bound.run(engine);
    let _ = std::fs::remove_dir_all(&sessions);
    served?;
    Ok(())
}

/// This server's parked conversations: a folder of its own (by process id) under the cache;
/// those of servers no longer running are removed first (where `/proc` tells).
fn sessions_dir() -> PathBuf {
    let root = gemma_app::config::cache_dir().join("serve-sessions");
    let proc = std::path::Path::new("/proc/self");
    for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        let gone = proc.exists() && !std::path::Path::new("/proc").join(&pid).exists();
        if gone && pid.bytes().all(|b| b.is_ascii_digit()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    root.join(std::process::id().to_string())
}

/// Fetches a picture's http(s) URL for the server: public addresses only (every redirect
/// checked), at most `max` bytes, 15 s.
fn fetcher(max: usize) -> gemma_serve::Fetcher {
    use gemma_tools::builtin::net;
    gemma_serve::Fetcher(std::sync::Arc::new(move |url: String| {
        Box::pin(async move {
            let url = net::check_url(&url, false).map_err(|e| e.to_string())?;
            let client = net::client(false, std::time::Duration::from_secs(15))
                .map_err(|e| e.to_string())?;
            let got = net::get(&client, url, false, max, "image/*")
                .await
                .map_err(|e| e.to_string())?;
            match got.truncated {
                true => Err(format!("the picture is over {max} bytes")),
                false => Ok(got.body),
            }
        })
    }))
}

/// The model's name for clients: its file's stem (or its folder's name), the demo model's when
/// none is named; `None` for a remote engine's (it names its own).
fn model_name(path: Option<&std::path::Path>) -> Option<String> {
    let path = path.unwrap_or(std::path::Path::new(demo::FILE_NAME));
    let stem = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    stem.map(|s| s.to_string_lossy().into_owned())
}

/// Where pictures and recordings sent to the server are kept for the engine to read.
fn media_dir() -> PathBuf {
    gemma_app::config::cache_dir().join("serve-media")
}
