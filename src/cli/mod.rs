//! Command-line interface: the argument types and the dispatch to each command.

mod chat;
mod generate;
mod tui;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use anyhow::Context;
use gemma_chat::config::{Config, config_path};
use gemma_chat::model::ComputeDtype;

/// gemma-chat: chat with Gemma models in your terminal, in-process.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Stream one chat answer to this prompt to stdout (no TUI).
    #[arg(long)]
    prompt: Option<String>,
    #[command(flatten)]
    common: ModelArgs,
    /// Most tokens per answer (default: the config's `sampling.max_new_tokens`).
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Sampling temperature, 0 to 2, 0 greedy (default: the config, then the model's).
    #[arg(long)]
    temperature: Option<f32>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one prompt headlessly, for scripts and checks.
    Generate(generate::GenerateArgs),
}

/// Options shared by every command that loads a model. Each one overrides the config file.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// The config file (default: $GEMMA_CHAT_CONFIG, then the platform's config dir; see
    /// `config/default.toml` for every key).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Model: a directory (config.json + safetensors) or a .gguf file. Defaults to
    /// $GEMMA_CHAT_MODEL, then the config's `model.path`, then the demo model (Gemma 3 270M,
    /// fetched on first use).
    #[arg(long, env = "GEMMA_CHAT_MODEL")]
    model: Option<PathBuf>,
    /// Compute dtype: f32 or f16 (default: the config's `model.dtype`).
    #[arg(long, env = "GEMMA_CHAT_DTYPE")]
    dtype: Option<ComputeDtype>,
    /// Compute backend: cpu, wgpu or cuda (default: the config's `model.backend`).
    #[arg(long, env = "GEMMA_CHAT_BACKEND")]
    backend: Option<String>,
}

/// What to load and where, after flags, environment and the config file.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    /// The model path; `None` is the demo model.
    pub model: Option<PathBuf>,
    /// Compute dtype.
    pub dtype: ComputeDtype,
    /// Backend name.
    pub backend: String,
}

impl ModelArgs {
    /// The config file, read over the built-in one.
    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Config::load(
            config_path(self.config.as_deref()).as_deref(),
        )?)
    }

    /// Flags (and their environment variables) over the config file.
    pub fn choice(&self, config: &Config) -> anyhow::Result<ModelChoice> {
        let file_model = Some(config.model.path.trim())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let dtype = match self.dtype {
            Some(d) => d,
            None => config
                .model
                .dtype
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))
                .context("model.dtype")?,
        };
        Ok(ModelChoice {
            model: self.model.clone().or(file_model),
            dtype,
            backend: self.backend.clone().unwrap_or(config.model.backend.clone()),
        })
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(Command::Generate(args)) = cli.command {
        return generate::run(args);
    }
    let config = cli.common.config()?;
    let max_new = cli.max_new_tokens.unwrap_or(config.sampling.max_new_tokens);
    let temperature = cli
        .temperature
        .or(config.sampling.temperature)
        .unwrap_or(1.0);
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stdout());
    match cli.prompt {
        Some(prompt) => chat::once(&cli.common, &prompt, max_new, temperature),
        None if interactive => tui::run(&cli.common, config, cli.max_new_tokens, cli.temperature),
        // Piped: a line-by-line chat on stdin/stdout.
        None => chat::run(&cli.common, max_new, temperature),
    }
}
