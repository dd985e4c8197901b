//! The TOML configuration, each key written once: the typed structure below is what the file
//! means, `config/default.toml` (embedded) holds every key's default and documentation, and a
//! user's file is laid over it and read into that structure in one pass ([`file`], which keeps
//! every value's line and column for errors). Where the file is found is here too; the ranges
//! and precedence of the sampling settings live in [`sampling`]. Nothing here reads weights.

pub mod action;
pub mod approve;
mod context;
mod file;
pub mod keymap;
mod named;
pub mod sampling;
mod serve;
pub mod thinking;
pub mod tools;
pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};

pub use self::file::check_url;
pub use self::serve::ServeConfig;
pub use self::thinking::{Budgets, Thinking};
pub use self::tools::{McpConfig, ServerConfig, ToolsConfig};
pub use gemma_protocol::{Backend, Dtype, GpuWeights, KvDtype, ThinkingPolicy};

/// The largest config file read (a config is a few KiB).
const CONFIG_LIMIT: u64 = 1 << 20;

/// The built-in configuration, every key commented.
pub const DEFAULT_TOML: &str = include_str!("../../../../config/default.toml");

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[model]`.
    pub model: ModelConfig,
    /// `[engine]`.
    pub engine: EngineConfig,
    /// `[sampling]`.
    pub sampling: SamplingConfig,
    /// `[sessions]`.
    pub sessions: SessionsConfig,
    /// `[speculate]`.
    pub speculate: SpeculateConfig,
    /// `[serve]`.
    pub serve: ServeConfig,
    /// `[ui]`.
    pub ui: UiConfig,
    /// `[presets.NAME]`.
    #[serde(default)]
    pub presets: BTreeMap<String, Preset>,
    /// `[tools]`.
    pub tools: ToolsConfig,
    /// `[mcp.servers.NAME]`.
    #[serde(default)]
    pub mcp: McpConfig,
    /// Whether the user's file set `model.context_length` (then it must fit the model; the
    /// built-in value is capped at the model's maximum instead).
    #[serde(skip)]
    pub context_length_set: bool,
}

/// `engine.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// The model in this process.
    Local,
    /// An OpenAI-compatible server's model.
    Remote,
}

/// `ui.theme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Theme {
    /// Light text on a dark terminal.
    #[default]
    Dark,
    /// Dark text on a light terminal.
    Light,
}

/// `[model]`: what to load and where to run it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Model directory or .gguf file; empty for the demo model.
    pub path: String,
    /// The vision tower of a GGUF model: llama.cpp's mmproj file; empty: an `mmproj*.gguf`
    /// beside the model, if any.
    pub mmproj: String,
    /// The compute dtype.
    #[serde(deserialize_with = "named::by_name")]
    pub dtype: Dtype,
    /// What the KV cache keeps on the CPU backend in f32.
    #[serde(deserialize_with = "named::by_name")]
    pub kv_dtype: KvDtype,
    /// How a GGUF's quantized weights sit on a GPU backend.
    #[serde(deserialize_with = "named::by_name")]
    pub gpu_weights: GpuWeights,
    /// The backend.
    #[serde(deserialize_with = "named::by_name")]
    pub backend: Backend,
    /// Context limit per tab, in tokens.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub context_length: usize,
    /// Gemma 4 thinking for new tabs: a level or a number of thought tokens per turn.
    pub thinking: Thinking,
    /// The thought tokens per turn of the named levels.
    pub thinking_budgets: Budgets,
    /// Written in the thought before a close the budget forces (empty: nothing).
    pub thinking_budget_message: String,
}

impl ModelConfig {
    /// The text written before a forced close of the thought, if any.
    pub fn thinking_message(&self) -> Option<String> {
        Some(self.thinking_budget_message.clone()).filter(|m| !m.trim().is_empty())
    }
}

/// `[engine]`: the model in this process, or an OpenAI-compatible server's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Local or remote.
    pub kind: EngineKind,
    /// The server's base URL.
    pub url: String,
    /// The model to ask the server for (empty: its first).
    pub model: String,
    /// The name of the environment variable with the API key (empty: none).
    pub api_key_env: String,
    /// Seconds to connect.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub connect_timeout_s: u64,
    /// Seconds from a request to the first byte of its answer.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub first_byte_timeout_s: u64,
    /// Seconds a started answer (or a request's body) may go without news before the turn
    /// fails; with a server that is down, how long headless runs wait for it.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub idle_timeout_s: u64,
}

/// `[sampling]`: unset values fall back to the model's `generation_config.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingConfig {
    /// 0 to 2; 0 is greedy.
    #[serde(default, deserialize_with = "knob::temperature")]
    pub temperature: Option<f32>,
    /// 0 is off.
    #[serde(default, deserialize_with = "knob::top_k")]
    pub top_k: Option<usize>,
    /// In (0, 1].
    #[serde(default, deserialize_with = "knob::top_p")]
    pub top_p: Option<f32>,
    /// In [0, 1].
    #[serde(default, deserialize_with = "knob::min_p")]
    pub min_p: Option<f32>,
    /// 0 is a random seed per turn.
    #[serde(default, deserialize_with = "knob::seed")]
    pub seed: Option<u64>,
    /// Most tokens per answer.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub max_new_tokens: usize,
    /// Texts that end an answer.
    pub stop: Vec<String>,
}

/// `[presets.NAME]`: settings a tab takes together; what is left out is inherited.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The system prompt.
    pub system: Option<String>,
    /// 0 to 2.
    #[serde(default, deserialize_with = "knob::temperature")]
    pub temperature: Option<f32>,
    /// 0 is off.
    #[serde(default, deserialize_with = "knob::top_k")]
    pub top_k: Option<usize>,
    /// In (0, 1].
    #[serde(default, deserialize_with = "knob::top_p")]
    pub top_p: Option<f32>,
    /// In [0, 1].
    #[serde(default, deserialize_with = "knob::min_p")]
    pub min_p: Option<f32>,
    /// 0 is a random seed per turn.
    #[serde(default, deserialize_with = "knob::seed")]
    pub seed: Option<u64>,
    /// Gemma 4 thinking: a level or a number of thought tokens per turn.
    pub thinking: Option<Thinking>,
    /// Most tokens per answer.
    #[serde(default, deserialize_with = "knob::max_new_tokens")]
    pub max_new_tokens: Option<usize>,
    /// Soft tokens per attached picture at most: 70, 140, 280, 560 or 1120.
    #[serde(default, deserialize_with = "knob::image_tokens")]
    pub image_tokens: Option<usize>,
    /// Whether the model may, must or must not call tools: `auto`, `required`, `none`.
    #[serde(default, deserialize_with = "tools::choice_opt")]
    pub tool_choice: Option<gemma_protocol::ToolChoice>,
    /// Speculative decoding: `off`, `lookup`, `drafter` or `auto` (over `[speculate] kind`).
    #[serde(default, deserialize_with = "named::by_name_opt")]
    pub speculate: Option<gemma_protocol::Speculate>,
}

/// `[speculate]`: speculative decoding of answers (the same tokens, sooner).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculateConfig {
    /// `off`, `lookup` (drafts from the conversation itself), `drafter` or `auto`.
    #[serde(deserialize_with = "named::by_name")]
    pub kind: gemma_protocol::Speculate,
    /// Most draft tokens a step checks, 1 to 16.
    #[serde(deserialize_with = "draft_max")]
    pub draft_max: usize,
}

impl SpeculateConfig {
    /// The protocol's settings.
    pub fn speculation(self) -> gemma_protocol::Speculation {
        gemma_protocol::Speculation {
            kind: self.kind,
            draft_max: self.draft_max,
        }
    }
}

/// `draft_max`: 1 to [`gemma_protocol::Speculation::MAX_DRAFT`].
fn draft_max<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    let most = gemma_protocol::Speculation::MAX_DRAFT;
    let v = i64::deserialize(d)?;
    usize::try_from(v)
        .ok()
        .filter(|n| (1..=most).contains(n))
        .ok_or_else(|| serde::de::Error::custom(format!("{v} is not 1 to {most}")))
}

/// `[sessions]`: memory for warm tabs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// MiB of KV state on the device (0: no limit).
    #[serde(deserialize_with = "at_least::<_, _, 0>")]
    pub memory_budget_mb: u64,
    /// MiB of KV state in host RAM (0: no limit).
    #[serde(deserialize_with = "at_least::<_, _, 0>")]
    pub host_budget_mb: u64,
    /// What finished turns keep of their thoughts.
    #[serde(deserialize_with = "named::by_name")]
    pub thinking_policy: ThinkingPolicy,
    /// MiB of disk for warm-restart KV snapshots (0: off).
    #[serde(deserialize_with = "at_least::<_, _, 0>")]
    pub kv_disk_mb: u64,
    /// Days closed tabs' chats are kept (0: for ever).
    #[serde(deserialize_with = "at_least::<_, _, 0>")]
    pub keep_closed_days: u64,
    /// What a tab does when its context fills up.
    #[serde(deserialize_with = "context::mode")]
    pub context_overflow: gemma_protocol::OverflowMode,
    /// The share of the context that sets it off.
    #[serde(deserialize_with = "context::share")]
    pub compact_at: f64,
    /// The request for the summary (empty: the built-in one).
    pub compact_prompt: String,
}

/// `[ui]`: looks and keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// The preset new tabs start with (empty: none).
    pub default_preset: String,
    /// Colours.
    pub theme: Theme,
    /// Thoughts expanded by default.
    pub show_thoughts: bool,
    /// The largest text file `/attach` and `--attach` take, in KiB.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub attach_max_kb: u64,
    /// Action name → key chords.
    pub keys: BTreeMap<String, Vec<String>>,
}

/// Reads a whole number of `MIN` or more (refused with the rule otherwise).
pub(crate) fn at_least<'de, D, T, const MIN: i64>(d: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    let v = i64::deserialize(d)?;
    if v < MIN {
        return Err(serde::de::Error::custom(format!(
            "{v} is out of range: allowed {MIN} or more"
        )));
    }
    T::try_from(v).map_err(|_| serde::de::Error::custom(format!("{v} is too large")))
}

mod knob;

impl Preset {
    /// The preset's sampling values as a precedence layer (a tab's own).
    pub fn sampling_layer(&self) -> sampling::SamplingLayer {
        sampling::SamplingLayer {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
        }
    }
}

impl Config {
    /// The preset named `name`, or what to say: the presets there are, or how to add one.
    pub fn preset(&self, name: &str) -> std::result::Result<&Preset, String> {
        self.presets.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.presets.keys().map(String::as_str).collect();
            if known.is_empty() {
                format!("no preset {name:?}: the config defines none (add [presets.NAME])")
            } else {
                format!("no preset {name:?}: try {}", known.join(", "))
            }
        })
    }

    /// The file's sampling settings as a precedence layer.
    pub fn sampling_layer(&self) -> sampling::SamplingLayer {
        let s = &self.sampling;
        sampling::SamplingLayer {
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            seed: s.seed,
        }
    }

    /// The built-in configuration alone.
    pub fn builtin() -> Result<Self> {
        Self::from_layers(None)
    }

    /// The built-in configuration with the file at `path` (its text: `text`) laid over it. Every
    /// problem in the file is reported with its line and column.
    pub fn from_layers(user: Option<(&Path, &str)>) -> Result<Self> {
        file::read(user)
    }

    /// Reads the file at `path` (when there is one) over the built-in configuration. Something
    /// at `path` that cannot be read (a dangling symlink, a loop, no permission, not UTF-8) is an
    /// error, never silently the defaults.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        match path.filter(|p| std::fs::symlink_metadata(p).is_ok()) {
            Some(p) => {
                let cannot = |why: String| {
                    Error::Settings(format!(
                        "cannot read the config file {}: {why}; fix or remove it",
                        p.display()
                    ))
                };
                // A pipe or a device as the config would block or never end: refused unread.
                let bytes = gemma_files::read_limited(p, CONFIG_LIMIT)
                    .map_err(|e| cannot(e.to_string()))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| cannot("stream did not contain valid UTF-8".into()))?;
                Self::from_layers(Some((p, &text)))
            }
            None => Self::builtin(),
        }
    }
}

/// Where warm-restart KV snapshots go: `$GEMMA_CHAT_CACHE_DIR`, else the platform's cache dir
/// (e.g. `~/.cache/gemma-chat`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("GEMMA_CHAT_CACHE_DIR")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            directories::ProjectDirs::from("", "", "gemma-chat")
                .map(|d| d.cache_dir().to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from(".gemma-chat-cache"))
}

/// Where the user's config file is: `flag` > `$GEMMA_CHAT_CONFIG` >
/// `$XDG_CONFIG_HOME/gemma-chat/config.toml` > the platform's config dir.
pub fn config_path(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("GEMMA_CHAT_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(x).join("gemma-chat/config.toml"));
    }
    directories::ProjectDirs::from("", "", "gemma-chat").map(|d| d.config_dir().join("config.toml"))
}
