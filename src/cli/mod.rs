//! Command-line interface: the argument types and the dispatch to each command.

mod bench;
mod chat;
mod chats_cmd;
mod config_cmd;
mod generate;
mod remote_chat;
mod template_cmd;
mod tui;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use anyhow::Context;
use gemma_chat::config::resolve::{SamplingLayer, Source};
use gemma_chat::config::{Config, config_path};
use gemma_chat::engine::RemoteOptions;
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
    /// Most tokens per answer, 1 or more (default: the config's `sampling.max_new_tokens`).
    #[arg(long, env = "GEMMA_CHAT_MAX_NEW_TOKENS", value_parser = at_least_one)]
    max_new_tokens: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Write model text as it is, control characters included (by default headless output
    /// drops every control character but newline and tab, so that generated escape sequences
    /// cannot reach the terminal).
    #[arg(long, global = true)]
    raw: bool,
}

/// `text` as it may be written to a terminal: without control characters (escape sequences,
/// bell, carriage return, C1 codes) but newline and tab, unless `raw`.
pub fn printable(text: &str, raw: bool) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() && c != '\n' && c != '\t';
    if raw || !text.contains(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.chars().filter(|&c| !bad(c)).collect())
}

/// Sampling flags; each overrides its environment variable, which overrides the config file,
/// which overrides the model's `generation_config.json`.
#[derive(Debug, Args, Clone)]
pub struct SamplingArgs {
    /// Temperature, 0 to 2 (0 is greedy).
    #[arg(long, global = true, env = "GEMMA_CHAT_TEMPERATURE", value_parser = in_range(0.0, 2.0))]
    temperature: Option<f32>,
    /// Top-k (0 is off).
    #[arg(long, env = "GEMMA_CHAT_TOP_K", global = true)]
    top_k: Option<usize>,
    /// Top-p, in (0, 1].
    #[arg(long, global = true, env = "GEMMA_CHAT_TOP_P", value_parser = in_range(1e-6, 1.0))]
    top_p: Option<f32>,
    /// Min-p, in [0, 1].
    #[arg(long, global = true, env = "GEMMA_CHAT_MIN_P", value_parser = in_range(0.0, 1.0))]
    min_p: Option<f32>,
    /// Seed (0 is random).
    #[arg(long, env = "GEMMA_CHAT_SEED", global = true)]
    seed: Option<u64>,
}

/// A clap parser for a count of 1 or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A clap parser for a float within `lo..=hi`.
fn in_range(lo: f32, hi: f32) -> impl Fn(&str) -> Result<f32, String> + Clone {
    move |s: &str| {
        let v: f32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("{v} is out of range: allowed {lo} to {hi}"))
        }
    }
}

impl SamplingArgs {
    /// The flag, environment and config-file layers, highest first. A value counts as a flag
    /// when its option is on the command line, else it came from the environment.
    pub fn layers(&self, config: &Config) -> Vec<(Source, SamplingLayer)> {
        let argv: Vec<String> = std::env::args().collect();
        let on_line = |name: &str| {
            argv.iter()
                .any(|a| a == &format!("--{name}") || a.starts_with(&format!("--{name}=")))
        };
        let mut flag = SamplingLayer::default();
        let mut env = SamplingLayer::default();
        macro_rules! split {
            ($field:ident, $name:literal) => {
                if let Some(v) = self.$field {
                    if on_line($name) {
                        flag.$field = Some(v);
                    } else {
                        env.$field = Some(v);
                    }
                }
            };
        }
        split!(temperature, "temperature");
        split!(top_k, "top-k");
        split!(top_p, "top-p");
        split!(min_p, "min-p");
        split!(seed, "seed");
        vec![
            (Source::Flag, flag),
            (Source::Env, env),
            (Source::File, config.sampling_layer()),
        ]
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one prompt headlessly, for scripts and checks.
    Generate(generate::GenerateArgs),
    /// Where the config file is, and the settings in force.
    Config(config_cmd::ConfigArgs),
    /// Measure load time, prefill and decode speed, time to first token and memory.
    Bench(bench::BenchArgs),
    /// See what a chat template renders for a conversation.
    Template(template_cmd::TemplateArgs),
    /// Write saved chats as Markdown or JSON.
    Export(chats_cmd::ExportArgs),
    /// Read chats (gemma-chat's JSON export, or ChatGPT's conversations.json) into new tabs.
    Import(chats_cmd::ImportArgs),
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
    #[arg(long, env = "GEMMA_CHAT_MODEL", global = true)]
    model: Option<PathBuf>,
    /// Compute dtype: f32, f16 or bf16 (default: the config's `model.dtype`).
    #[arg(long, env = "GEMMA_CHAT_DTYPE", global = true)]
    dtype: Option<ComputeDtype>,
    /// Compute backend: cpu, wgpu or cuda (default: the config's `model.backend`).
    #[arg(long, env = "GEMMA_CHAT_BACKEND", global = true)]
    backend: Option<String>,
    /// Chat with the model an OpenAI-compatible server serves (llama-server, vLLM, SGLang) at
    /// this base URL, e.g. http://127.0.0.1:8080 (sets [engine] kind = "remote" and url).
    #[arg(long, env = "GEMMA_CHAT_REMOTE", global = true, value_name = "URL")]
    remote: Option<String>,
}

/// What to load and where, after flags, environment and the config file.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    /// The model path; `None` is the demo model.
    pub model: Option<PathBuf>,
    /// Compute dtype; `None` (`auto`) lets the device choose ([`backend::preferred_dtype`]).
    pub dtype: Option<ComputeDtype>,
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
        let dtype = match (self.dtype, config.model.dtype.as_str()) {
            (Some(d), _) => Some(d),
            (None, "auto") => None,
            (None, name) => Some(
                name.parse()
                    .map_err(|e: String| anyhow::anyhow!(e))
                    .context("model.dtype")?,
            ),
        };
        Ok(ModelChoice {
            model: self.model.clone().or(file_model),
            dtype,
            backend: self.backend.clone().unwrap_or(config.model.backend.clone()),
        })
    }
}

impl ModelArgs {
    /// The remote engine's settings when `--remote` or `[engine] kind = "remote"` asks for it.
    pub fn remote(&self, config: &Config) -> anyhow::Result<Option<RemoteOptions>> {
        let e = &config.engine;
        let url = match (&self.remote, e.kind.as_str()) {
            (Some(u), _) => u.trim().to_string(),
            (None, "remote") if e.url.trim().is_empty() => anyhow::bail!(
                "[engine] kind = \"remote\" needs [engine] url (e.g. \"http://127.0.0.1:8080\"), \
                 or start with --remote URL"
            ),
            (None, "remote") => e.url.trim().to_string(),
            _ => return Ok(None),
        };
        gemma_chat::config::layer::check_url(&url)
            .map_err(|why| anyhow::anyhow!("--remote / [engine] url: {why}"))?;
        let api_key = match e.api_key_env.trim() {
            "" => None,
            name => Some(std::env::var(name).map_err(|_| {
                anyhow::anyhow!(
                    "[engine] api_key_env names the environment variable {name}, which is not \
                     set: export {name}=<your key>, or empty api_key_env"
                )
            })?),
        };
        Ok(Some(RemoteOptions {
            url,
            model: Some(e.model.trim().to_string()).filter(|m| !m.is_empty()),
            api_key,
            connect_timeout: std::time::Duration::from_secs(e.connect_timeout_s.max(1)),
            first_byte_timeout: std::time::Duration::from_secs(e.first_byte_timeout_s.max(1)),
            context_length: config
                .model
                .context_length_set
                .then_some(config.model.context_length),
        }))
    }
}

impl ModelChoice {
    /// The dtype to load in on `device`: the chosen one, or the device's preference.
    pub fn dtype_on(&self, device: &burn::tensor::Device) -> ComputeDtype {
        self.dtype
            .unwrap_or_else(|| gemma_chat::backend::preferred_dtype(device))
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Generate(args)) => {
            return generate::run(args, &cli.common, &cli.sampling, cli.raw);
        }
        Some(Command::Config(args)) => return config_cmd::run(args, &cli.common, &cli.sampling),
        Some(Command::Bench(args)) => return bench::run(args, &cli.common),
        Some(Command::Template(args)) => return template_cmd::run(args, &cli.common),
        Some(Command::Export(args)) => return chats_cmd::export(args, cli.raw),
        Some(Command::Import(args)) => return chats_cmd::import(args),
        None => {}
    }
    let config = cli.common.config()?;
    let max_new = cli.max_new_tokens.unwrap_or(config.sampling.max_new_tokens);
    let temperature = cli
        .sampling
        .temperature
        .or(config.sampling.temperature)
        .unwrap_or(1.0);
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stdout());
    if let Some(remote) = cli.common.remote(&config)? {
        match cli.prompt {
            Some(prompt) => {
                return remote_chat::once(remote, &prompt, max_new, temperature, cli.raw);
            }
            None if !interactive => return remote_chat::run(remote, max_new, temperature, cli.raw),
            None => {}
        }
    }
    match cli.prompt {
        Some(prompt) => chat::once(&cli.common, &prompt, max_new, temperature, cli.raw),
        None if interactive => tui::run(&cli.common, config, cli.max_new_tokens, &cli.sampling),
        // Piped: a line-by-line chat on stdin/stdout.
        None => chat::run(&cli.common, max_new, temperature, cli.raw),
    }
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn headless_text_keeps_newlines_and_tabs_only() {
        let evil = "a\u{1b}]0;title\u{7}b\u{1b}[2Jc\r\nd\te\u{9b}f";
        assert_eq!(printable(evil, false), "a]0;titleb[2Jc\nd\tef");
        assert_eq!(printable(evil, true), evil);
        assert!(matches!(
            printable("plain\ntext", false),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
