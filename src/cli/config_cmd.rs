//! `gemma-chat config path|init|show`: where the files are, a commented config to start from,
//! and the settings in force with where each comes from.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gemma_app::config::sampling::{Source, resolve};
use gemma_app::config::{DEFAULT_TOML, cache_dir, config_path};
use gemma_model::checkpoint::GenerationConfig;
use gemma_model::demo;

use super::{ModelArgs, SamplingArgs};

/// Arguments of `config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Print where gemma-chat reads its config and keeps its chats and caches.
    Path,
    /// Write the commented default config to the config path.
    Init {
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Print the sampling settings in force and where each comes from.
    Show,
}

/// Runs `config`.
pub fn run(args: ConfigArgs, common: &ModelArgs, sampling: &SamplingArgs) -> anyhow::Result<()> {
    let path = config_path(common.config.as_deref())
        .context("no config directory could be found for this platform; use --config PATH")?;
    match args.action {
        Action::Path => print_paths(&path)?,
        Action::Init { force } => {
            if path.exists() && !force {
                bail!("{} exists; pass --force to replace it", path.display());
            }
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            std::fs::write(&path, DEFAULT_TOML)
                .with_context(|| format!("writing {}", path.display()))?;
            outln!("wrote {}", path.display())?;
        }
        Action::Show => show(common, sampling)?,
    }
    Ok(())
}

/// `config path`: where the config, the data, the chats and the cache are.
fn print_paths(path: &std::path::Path) -> anyhow::Result<()> {
    let exists = if path.exists() {
        ""
    } else {
        " (not created yet: `gemma-chat config init`)"
    };
    outln!("config: {}{exists}", path.display())?;
    let data = demo::data_dir()?;
    outln!("data:   {}", data.display())?;
    outln!("chats:  {}", data.join("chats").display())?;
    outln!("cache:  {}", cache_dir().display())?;
    Ok(())
}

/// `config show`: the engine or model a chat would use, and each sampling value with where it
/// comes from.
fn show(common: &ModelArgs, sampling: &SamplingArgs) -> anyhow::Result<()> {
    let config = common.config()?;
    let choice = common.choice(&config)?;
    let remote = common.remote_url(&config);
    let mut layers = sampling.layers(&config);
    if let Some(model) = choice.model.as_ref().filter(|_| remote.is_none()) {
        layers.push((Source::Model, GenerationConfig::read(model).sampling));
    }
    let r = resolve(&layers, 0);
    let p = &r.params;
    let rows = [
        ("temperature", p.temperature.to_string()),
        ("top_k", p.top_k.to_string()),
        ("top_p", p.top_p.to_string()),
        ("min_p", p.min_p.to_string()),
        (
            "seed",
            if p.seed == 0 {
                "random".into()
            } else {
                p.seed.to_string()
            },
        ),
    ];
    if let Some(url) = &remote {
        let model = Some(config.engine.model.trim())
            .filter(|m| !m.is_empty())
            .unwrap_or("the first it lists");
        outln!(
            "engine: remote, {} (model: {})",
            super::printable(url, false),
            super::printable(model, false)
        )?;
    } else {
        let model = choice
            .model
            .as_ref()
            .map_or("the demo model".to_string(), |m| m.display().to_string());
        outln!(
            "model: {model} ({}, {}, KV cache {} on the CPU in f32, quantized weights \
             on a GPU: {})",
            choice.backend,
            choice
                .dtype
                .map_or("auto: f32 on the CPU, bf16 or f16 on a GPU", |d| d.as_str()),
            choice.kv_dtype,
            gemma_protocol::Named::name(choice.gpu_weights)
        )?;
    }
    for ((name, value), source) in rows.iter().zip(r.sources) {
        outln!("{name} = {value}  ({})", source.as_str())?;
    }
    Ok(())
}
