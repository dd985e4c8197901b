//! The TOML configuration: the embedded `config/default.toml` with the user's file laid over it,
//! and where that file is found. The file's checks live in [`layer`]; the precedence of flags,
//! environment, file and the model's own defaults in [`resolve`]. Nothing here reads weights.

pub mod action;
pub mod keymap;
pub mod layer;
pub mod resolve;
pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The built-in configuration, every key commented.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

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
    /// `[ui]`.
    pub ui: UiConfig,
    /// `[presets.NAME]`.
    #[serde(default)]
    pub presets: BTreeMap<String, Preset>,
}

/// `[presets.NAME]`: settings a tab takes together; what is left out is inherited.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The system prompt.
    pub system: Option<String>,
    /// 0 to 2.
    pub temperature: Option<f32>,
    /// 0 is off.
    pub top_k: Option<usize>,
    /// In (0, 1].
    pub top_p: Option<f32>,
    /// In [0, 1].
    pub min_p: Option<f32>,
    /// 0 is a random seed per turn.
    pub seed: Option<u64>,
    /// Gemma 4 thinking.
    pub thinking: Option<bool>,
    /// Most tokens per answer.
    pub max_new_tokens: Option<usize>,
}

/// `[model]`: what to load and where to run it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Model directory or .gguf file; empty for the demo model.
    pub path: String,
    /// `auto`, `f32`, `f16` or `bf16`.
    pub dtype: String,
    /// `cpu`, `wgpu` or `cuda`.
    pub backend: String,
    /// Context limit per tab, in tokens.
    pub context_length: usize,
    /// Whether a user file set `context_length` (then it must fit the model; the built-in value
    /// is capped at the model's maximum instead).
    #[serde(skip)]
    pub context_length_set: bool,
    /// Gemma 4 thinking for new tabs.
    pub thinking: bool,
}

/// `[engine]`: the model in this process, or an OpenAI-compatible server's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// `local` or `remote`.
    pub kind: String,
    /// The server's base URL.
    pub url: String,
    /// The model to ask the server for (empty: its first).
    pub model: String,
    /// The name of the environment variable with the API key (empty: none).
    pub api_key_env: String,
    /// Seconds to connect.
    pub connect_timeout_s: u64,
    /// Seconds from a request to the first byte of its answer.
    pub first_byte_timeout_s: u64,
}

/// `[sampling]`: unset values fall back to the model's `generation_config.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingConfig {
    /// 0 to 2; 0 is greedy.
    pub temperature: Option<f32>,
    /// 0 is off.
    pub top_k: Option<usize>,
    /// In (0, 1].
    pub top_p: Option<f32>,
    /// In [0, 1].
    pub min_p: Option<f32>,
    /// 0 is a random seed per turn.
    pub seed: Option<u64>,
    /// Most tokens per answer.
    pub max_new_tokens: usize,
    /// Texts that end an answer.
    pub stop: Vec<String>,
}

/// `[sessions]`: memory for warm tabs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// MiB of KV state on the device (0: no limit).
    pub memory_budget_mb: u64,
    /// MiB of KV state in host RAM (0: no limit).
    pub host_budget_mb: u64,
    /// `strip` or `keep`.
    pub thinking_policy: String,
    /// MiB of disk for warm-restart KV snapshots (0: off).
    pub kv_disk_mb: u64,
    /// Days closed tabs' chats are kept (0: for ever).
    pub keep_closed_days: u64,
}

/// `[ui]`: looks and keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// The preset new tabs start with (empty: none).
    pub default_preset: String,
    /// `dark` or `light`.
    pub theme: String,
    /// Thoughts expanded by default.
    pub show_thoughts: bool,
    /// Action name → key chords.
    pub keys: BTreeMap<String, Vec<String>>,
}

impl Config {
    /// The file's sampling settings as a precedence layer.
    pub fn sampling_layer(&self) -> resolve::SamplingLayer {
        let s = &self.sampling;
        resolve::SamplingLayer {
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            seed: s.seed,
        }
    }

    /// The built-in configuration alone.
    pub fn builtin() -> Result<Self> {
        toml::from_str(DEFAULT_TOML)
            .map_err(|e| Error::Settings(format!("the built-in config: {}", e.message())))
    }

    /// The built-in configuration with the file at `path` (its text: `text`) laid over it. Every
    /// problem in the file is reported with its line and column.
    pub fn from_layers(user: Option<(&Path, &str)>) -> Result<Self> {
        let mut config = Self::builtin()?;
        if let Some((path, text)) = user {
            config.apply(&layer::ConfigLayer::parse(path, text)?);
        }
        Ok(config)
    }

    /// Reads the file at `path` (when there is one) over the built-in configuration. Something
    /// at `path` that cannot be read (a dangling symlink, a loop, no permission, not UTF-8) is an
    /// error, never silently the defaults.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        match path.filter(|p| std::fs::symlink_metadata(p).is_ok()) {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    Error::Settings(format!(
                        "cannot read the config file {}: {e}; fix or remove it",
                        p.display()
                    ))
                })?;
                Self::from_layers(Some((p, &text)))
            }
            None => Self::builtin(),
        }
    }

    /// Lays a checked file over this configuration.
    pub fn apply(&mut self, l: &layer::ConfigLayer) {
        fn set<T: Clone>(dst: &mut T, v: &Option<toml::Spanned<T>>) {
            if let Some(v) = v {
                *dst = v.get_ref().clone();
            }
        }
        let count =
            |v: &Option<toml::Spanned<i64>>| v.as_ref().map(|s| (*s.get_ref()).max(0) as u64);
        if let Some(m) = &l.model {
            set(&mut self.model.path, &m.path);
            set(&mut self.model.dtype, &m.dtype);
            set(&mut self.model.backend, &m.backend);
            set(&mut self.model.thinking, &m.thinking);
            if let Some(c) = count(&m.context_length) {
                self.model.context_length = c as usize;
                self.model.context_length_set = true;
            }
        }
        if let Some(e) = &l.engine {
            let d = &mut self.engine;
            set(&mut d.kind, &e.kind);
            set(&mut d.url, &e.url);
            set(&mut d.model, &e.model);
            set(&mut d.api_key_env, &e.api_key_env);
            d.connect_timeout_s = count(&e.connect_timeout_s).unwrap_or(d.connect_timeout_s);
            d.first_byte_timeout_s =
                count(&e.first_byte_timeout_s).unwrap_or(d.first_byte_timeout_s);
        }
        if let Some(s) = &l.sampling {
            let f =
                |v: &Option<toml::Spanned<layer::Num>>| v.as_ref().map(|n| n.get_ref().f() as f32);
            let d = &mut self.sampling;
            d.temperature = f(&s.temperature).or(d.temperature);
            d.top_p = f(&s.top_p).or(d.top_p);
            d.min_p = f(&s.min_p).or(d.min_p);
            d.top_k = count(&s.top_k).map(|k| k as usize).or(d.top_k);
            d.seed = count(&s.seed).or(d.seed);
            if let Some(n) = count(&s.max_new_tokens) {
                d.max_new_tokens = n as usize;
            }
            set(&mut d.stop, &s.stop);
        }
        if let Some(s) = &l.sessions {
            let d = &mut self.sessions;
            d.memory_budget_mb = count(&s.memory_budget_mb).unwrap_or(d.memory_budget_mb);
            d.host_budget_mb = count(&s.host_budget_mb).unwrap_or(d.host_budget_mb);
            d.kv_disk_mb = count(&s.kv_disk_mb).unwrap_or(d.kv_disk_mb);
            d.keep_closed_days = count(&s.keep_closed_days).unwrap_or(d.keep_closed_days);
            set(&mut d.thinking_policy, &s.thinking_policy);
        }
        for (name, p) in l.presets.iter().flatten() {
            let f =
                |v: &Option<toml::Spanned<layer::Num>>| v.as_ref().map(|n| n.get_ref().f() as f32);
            self.presets.insert(
                name.clone(),
                Preset {
                    system: p.system.as_ref().map(|s| s.get_ref().clone()),
                    temperature: f(&p.temperature),
                    top_k: count(&p.top_k).map(|k| k as usize),
                    top_p: f(&p.top_p),
                    min_p: f(&p.min_p),
                    seed: count(&p.seed),
                    thinking: p.thinking.as_ref().map(|t| *t.get_ref()),
                    max_new_tokens: count(&p.max_new_tokens).map(|n| n as usize),
                },
            );
        }
        if let Some(u) = &l.ui {
            set(&mut self.ui.default_preset, &u.default_preset);
            set(&mut self.ui.theme, &u.theme);
            set(&mut self.ui.show_thoughts, &u.show_thoughts);
            for (name, chords) in u.keys.iter().flatten() {
                self.ui.keys.insert(name.clone(), chords.get_ref().clone());
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_config_parses_and_validates() {
        let c = Config::builtin().expect("valid");
        assert_eq!(c.model.backend, "cpu");
        assert_eq!(c.sampling.temperature, None);
        assert!(c.ui.keys.contains_key("send"));
    }

    #[test]
    fn a_user_file_overrides_only_what_it_sets() {
        let text = "[sampling]\ntemperature = 0.3\n[ui.keys]\nquit = [\"ctrl+x\"]\n";
        let c = Config::from_layers(Some((Path::new("u.toml"), text))).expect("valid");
        assert_eq!(c.sampling.temperature, Some(0.3));
        assert_eq!(c.ui.keys["quit"], vec!["ctrl+x".to_string()]);
        assert_eq!(c.ui.keys["send"], vec!["enter".to_string()]);
    }

    #[test]
    fn bad_files_are_refused_with_the_place_and_the_rule() {
        let err = |text: &str| {
            Config::from_layers(Some((Path::new("u.toml"), text)))
                .expect_err("invalid")
                .to_string()
        };
        let e = err("[sampling]\ntemperature = 3.0\n");
        assert!(
            e.contains("sampling.temperature") && e.contains("0 to 2"),
            "{e}"
        );
        let e = err("[sampling]\ntemprature = 1.0\n");
        assert!(e.contains("temprature"), "{e}");
        let e = err("[model]\npath = \n");
        assert!(e.contains("u.toml:2:"), "{e}");
    }
}
