//! Command-line interface: the argument types and the dispatch to each command.

mod chat;
mod generate;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// Most tokens to generate.
    #[arg(long, default_value_t = 512)]
    max_new_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one prompt headlessly, for scripts and checks.
    Generate(generate::GenerateArgs),
}

/// Options shared by every command that loads a model.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Model: a directory (config.json + safetensors) or a .gguf file. Defaults to
    /// $GEMMA_CHAT_MODEL, then to the demo model (Gemma 3 270M, fetched on first use).
    #[arg(long, env = "GEMMA_CHAT_MODEL")]
    model: Option<PathBuf>,
    /// Compute dtype: f32 or f16.
    #[arg(long, default_value = "f32")]
    dtype: ComputeDtype,
    /// Compute backend: cpu, wgpu or cuda.
    #[arg(long, default_value = "cpu")]
    backend: String,
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Generate(args)) => generate::run(args),
        None => match cli.prompt {
            Some(prompt) => chat::once(&cli.common, &prompt, cli.max_new_tokens, cli.temperature),
            None => chat::run(&cli.common, cli.max_new_tokens, cli.temperature),
        },
    }
}
