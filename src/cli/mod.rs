//! Command-line interface: the argument types and the dispatch to each command.

/// `println!` that returns the write's error instead of panicking (a closed pipe, a full disk):
/// the command ends with it, and `main` says so (quietly for a closed pipe).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($t)*)
    }};
}

/// `eprintln!` that never panics: with stderr closed or full, nothing more can be said.
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// `print!` that returns the write's error instead of panicking, flushed.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let mut o = std::io::stdout();
        write!(o, $($t)*).and_then(|_| o.flush())
    }};
}

mod attach;
mod bench;
mod bench_spec;
mod chats_cmd;
mod config_cmd;
mod front;
mod generate;
mod headless;
mod images;
mod mcp_cmd;
mod sampling_args;
mod serve;
mod template_cmd;
mod tools;
mod tui;

pub use self::sampling_args::SamplingArgs;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use gemma_app::config::sampling::MAX_NEW_TOKENS;
use gemma_app::config::{Config, EngineKind, config_path};
use gemma_engine::RemoteOptions;
use gemma_model::model::{ComputeDtype, GpuWeights, KvDtype};

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
    images: images::ImageArgs,
    #[command(flatten)]
    attach: attach::AttachArgs,
    #[command(flatten)]
    common: ModelArgs,
    /// Most tokens per answer, 1 or more (default: the config's `sampling.max_new_tokens`).
    #[arg(long, env = "GEMMA_CHAT_MAX_NEW_TOKENS", value_parser = MAX_NEW_TOKENS.parse_u64())]
    max_new_tokens: Option<u64>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    tab: headless::TabArgs,
    /// Write model text as it is, control characters included (by default headless output
    /// drops every control character but newline and tab, so that generated escape sequences
    /// cannot reach the terminal).
    #[arg(long, global = true)]
    raw: bool,
}

/// `text` as it may be written to a terminal ([`gemma_engine::protocol::text::printable`]: no
/// control characters but newline and tab, no bidirectional overrides), unless `raw`.
pub fn printable(text: &str, raw: bool) -> std::borrow::Cow<'_, str> {
    if raw {
        return std::borrow::Cow::Borrowed(text);
    }
    gemma_engine::protocol::text::printable(text)
}

/// The text of the file at `path`, a regular file of at most `limit` bytes.
pub fn read_text(path: &std::path::Path, limit: u64) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let bytes = gemma_files::read_limited(path, limit)
        .with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", path.display()))
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
    /// MCP servers: import them from Claude Desktop's or oterm's JSON, list them and their tools.
    Mcp(mcp_cmd::McpArgs),
    /// Serve the model behind the OpenAI chat completions API (`[serve]` in the config).
    Serve(serve::ServeArgs),
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
    /// The vision tower of a .gguf model: llama.cpp's mmproj GGUF (default: the config's
    /// `model.mmproj`, then an mmproj*.gguf beside the model).
    #[arg(long, env = "GEMMA_CHAT_MMPROJ", global = true, value_name = "FILE")]
    mmproj: Option<PathBuf>,
    /// Compute dtype: f32, f16 or bf16 (default: the config's `model.dtype`).
    #[arg(long, env = "GEMMA_CHAT_DTYPE", global = true)]
    dtype: Option<ComputeDtype>,
    /// What the KV cache keeps on the CPU backend in f32: f16, f32 or q8_0 (default: the
    /// config's `model.kv_dtype`).
    #[arg(long, env = "GEMMA_CHAT_KV_DTYPE", global = true, value_name = "TYPE")]
    kv_dtype: Option<KvDtype>,
    /// How a GGUF's quantized weights sit on a GPU: quantized (in their blocks) or bf16
    /// (dequantized at load, the reference) (default: the config's `model.gpu_weights`).
    #[arg(
        long,
        env = "GEMMA_CHAT_GPU_WEIGHTS",
        global = true,
        value_name = "MODE"
    )]
    gpu_weights: Option<GpuWeights>,
    /// Speculative decoding: off, lookup, drafter or auto (default: the config's
    /// `[speculate] kind`).
    #[arg(long, env = "GEMMA_CHAT_SPECULATE", global = true, value_name = "KIND")]
    speculate: Option<gemma_protocol::Speculate>,
    /// Compute backend: cpu, wgpu or cuda (default: the config's `model.backend`).
    #[arg(long, env = "GEMMA_CHAT_BACKEND", global = true)]
    backend: Option<gemma_protocol::Backend>,
    /// Chat with the model an OpenAI-compatible server serves (gemma-chat serve, llama-server,
    /// vLLM, SGLang) at this base URL, e.g. http://127.0.0.1:8080 (sets [engine] kind = "remote"
    /// and url).
    #[arg(long, env = "GEMMA_CHAT_REMOTE", global = true, value_name = "URL")]
    remote: Option<String>,
}

/// What to load and where, after flags, environment and the config file.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    /// The model path; `None` is the demo model.
    pub model: Option<PathBuf>,
    /// The mmproj file named by the flag or the config; `None`: one beside the model, if any.
    pub mmproj: Option<PathBuf>,
    /// Compute dtype; `None` (`auto`) lets the device choose ([`backend::preferred_dtype`]).
    pub dtype: Option<ComputeDtype>,
    /// What the host KV cache keeps (a model on the CPU backend in f32).
    pub kv_dtype: KvDtype,
    /// How quantized weights sit on a GPU.
    pub gpu_weights: GpuWeights,
    /// Backend name.
    pub backend: gemma_protocol::Backend,
}

impl ModelArgs {
    /// The config file, read over the built-in one.
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut config = Config::load(config_path(self.config.as_deref()).as_deref())?;
        if let Some(kind) = self.speculate {
            config.speculate.kind = kind;
        }
        Ok(config)
    }

    /// Flags (and their environment variables) over the config file.
    pub fn choice(&self, config: &Config) -> anyhow::Result<ModelChoice> {
        let file_model = Some(config.model.path.trim())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let dtype = self.dtype.or(ComputeDtype::of(config.model.dtype));
        let kv_dtype = self.kv_dtype.unwrap_or(config.model.kv_dtype);
        let gpu_weights = self.gpu_weights.unwrap_or(config.model.gpu_weights);
        let file_mmproj = Some(config.model.mmproj.trim())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        Ok(ModelChoice {
            model: self.model.clone().or(file_model),
            mmproj: self.mmproj.clone().or(file_mmproj),
            dtype,
            kv_dtype,
            gpu_weights,
            backend: self.backend.unwrap_or(config.model.backend),
        })
    }
}

impl ModelArgs {
    /// The server's URL when `--remote` or `[engine] kind = "remote"` asks for one (empty when
    /// the config names none).
    pub fn remote_url(&self, config: &Config) -> Option<String> {
        match (&self.remote, config.engine.kind) {
            (Some(u), _) => Some(u.trim().to_string()),
            (None, EngineKind::Remote) => Some(config.engine.url.trim().to_string()),
            (None, EngineKind::Local) => None,
        }
    }

    /// The remote engine's settings when `--remote` or `[engine] kind = "remote"` asks for it.
    pub fn remote(&self, config: &Config) -> anyhow::Result<Option<RemoteOptions>> {
        let e = &config.engine;
        let Some(url) = self.remote_url(config) else {
            return Ok(None);
        };
        if url.is_empty() {
            anyhow::bail!(
                "[engine] kind = \"remote\" needs [engine] url (e.g. \"http://127.0.0.1:8080\"), \
                 or start with --remote URL"
            );
        }
        gemma_app::config::check_url(&url)
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
            idle_timeout: std::time::Duration::from_secs(e.idle_timeout_s.max(1)),
            give_up_after: None,
            context_length: config
                .context_length_set
                .then_some(config.model.context_length),
            // The options' tools go to either engine ([`front::spawn_engine`]).
            tools: None,
            thinking_message: config.model.thinking_message(),
        }))
    }
}

impl ModelChoice {
    /// The dtype to load in on `device`: the chosen one, or the device's preference.
    pub fn dtype_on(&self, device: &burn::tensor::Device) -> ComputeDtype {
        self.dtype
            .unwrap_or_else(|| gemma_model::backend::preferred_dtype(device))
    }
}

/// A request refused as given, with what to do instead: exit code 2, as for a bad flag.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Reads the command line (exits with clap's message on a bad one).
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.sampling.note_sources(&matches);
    cli
}

/// Runs the parsed command line: a command, else the TUI in a terminal, else the headless chat
/// (`--prompt`, or piped lines), every chat through the engine protocol.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let max_new = cli.max_new_tokens.map(|n| n as usize);
    match cli.command {
        Some(Command::Generate(args)) => {
            return generate::run(args, &cli.common, &cli.sampling, &cli.tab, cli.raw);
        }
        Some(Command::Config(args)) => return config_cmd::run(args, &cli.common, &cli.sampling),
        Some(Command::Bench(args)) => return bench::run(args, &cli.common),
        Some(Command::Template(args)) => {
            let thinking = cli.tab.thinking.is_some_and(|l| l.is_on());
            return template_cmd::run(args, &cli.common, thinking, cli.raw);
        }
        Some(Command::Export(args)) => return chats_cmd::export(args, cli.raw),
        Some(Command::Import(args)) => return chats_cmd::import(args),
        Some(Command::Mcp(args)) => return mcp_cmd::run(args, &cli.common),
        Some(Command::Serve(args)) => return serve::run(args, &cli.common, &cli.sampling),
        None => {}
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (common, sampling, tab) = (&cli.common, &cli.sampling, &cli.tab);
    match cli.prompt {
        Some(prompt) => {
            let (prompt, images) = cli.attach.prompt(common, &prompt, &cli.images)?;
            headless::once(common, sampling, tab, max_new, (&prompt, images), cli.raw)
        }
        None if !cli.images.images.is_empty() || !cli.attach.files.is_empty() => Err(Refused(
            "--image and --attach go with --prompt TEXT (in the app, /attach PATH adds a picture \
             or a text file to the next message)"
                .into(),
        )
        .into()),
        None if interactive => {
            let mut config = common.config()?;
            tab.for_tui(&mut config)?;
            tui::run(common, config, max_new, sampling)
        }
        // Piped: a line-by-line chat on stdin/stdout.
        None => headless::lines(common, sampling, tab, max_new, cli.raw),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use gemma_app::config::Thinking;

    use super::{Cli, printable};

    #[test]
    fn thinking_is_a_level_or_a_number_of_tokens() {
        let level = |args: &[&str]| {
            Cli::try_parse_from([&["gemma-chat"], args].concat()).map(|c| c.tab.thinking)
        };
        assert_eq!(
            level(&["--thinking", "high"]).ok(),
            Some(Some(Thinking::High))
        );
        assert_eq!(
            level(&["--prompt", "hi", "--thinking", "300"]).ok(),
            Some(Some(Thinking::Tokens(300)))
        );
        assert_eq!(level(&[]).ok(), Some(None));
        // Alone (as `template render --thinking`), it is on: medium.
        assert_eq!(
            level(&["template", "render", "--messages", "m.json", "--thinking"]).ok(),
            Some(Some(Thinking::Medium))
        );
        let e = level(&["--thinking", "lots"])
            .expect_err("refused")
            .to_string();
        assert!(e.contains("unbounded"), "{e}");
    }

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
