//! The TOML configuration: the embedded `config/default.toml` with the user's file laid over it,
//! where that file is found, and the checks on its values. Nothing here reads the model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The built-in configuration, every key commented.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[model]`.
    pub model: ModelConfig,
    /// `[sampling]`.
    pub sampling: SamplingConfig,
    /// `[sessions]`.
    pub sessions: SessionsConfig,
    /// `[ui]`.
    pub ui: UiConfig,
}

/// `[model]`: what to load and where to run it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Model directory or .gguf file; empty for the demo model.
    pub path: String,
    /// `f32` or `f16`.
    pub dtype: String,
    /// `cpu`, `wgpu` or `cuda`.
    pub backend: String,
    /// Context limit per tab, in tokens.
    pub context_length: usize,
    /// Gemma 4 thinking for new tabs.
    pub thinking: bool,
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
}

/// `[ui]`: looks and keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// `dark` or `light`.
    pub theme: String,
    /// Thoughts expanded by default.
    pub show_thoughts: bool,
    /// Action name → key chords.
    pub keys: BTreeMap<String, Vec<String>>,
}

impl Config {
    /// The built-in configuration alone.
    pub fn builtin() -> Result<Self> {
        Self::from_layers(None)
    }

    /// The built-in configuration with `user` (its path, for messages, and its text) laid over.
    pub fn from_layers(user: Option<(&Path, &str)>) -> Result<Self> {
        let mut table = parse(Path::new("config/default.toml (built in)"), DEFAULT_TOML)?;
        if let Some((path, text)) = user {
            merge(&mut table, parse(path, text)?);
        }
        let where_ = user.map_or_else(
            || "the built-in config".into(),
            |(p, _)| p.display().to_string(),
        );
        let config = Config::deserialize(table)
            .map_err(|e| Error::Settings(format!("{where_}: {}", e.message().trim())))?;
        config
            .validate()
            .map_err(|e| Error::Settings(format!("{where_}: {e}")))?;
        Ok(config)
    }

    /// Reads the file at `path` (when it exists) over the built-in configuration.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        match path.filter(|p| p.exists()) {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
                Self::from_layers(Some((p, &text)))
            }
            None => Self::builtin(),
        }
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let s = &self.sampling;
        let check = |ok: bool, key: &str, range: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("`{key}` must be {range}"))
            }
        };
        if let Some(t) = s.temperature {
            check(
                (0.0..=2.0).contains(&t),
                "sampling.temperature",
                "from 0 to 2 (0 is greedy)",
            )?;
        }
        if let Some(p) = s.top_p {
            check(p > 0.0 && p <= 1.0, "sampling.top_p", "in (0, 1]")?;
        }
        if let Some(p) = s.min_p {
            check((0.0..=1.0).contains(&p), "sampling.min_p", "in [0, 1]")?;
        }
        check(
            s.max_new_tokens >= 1,
            "sampling.max_new_tokens",
            "at least 1",
        )?;
        check(
            self.model.context_length >= 1,
            "model.context_length",
            "at least 1",
        )?;
        check(
            ["f32", "f16"].contains(&self.model.dtype.as_str()),
            "model.dtype",
            "\"f32\" or \"f16\"",
        )?;
        check(
            crate::backend::BACKENDS.contains(&self.model.backend.as_str()),
            "model.backend",
            "\"cpu\", \"wgpu\" or \"cuda\"",
        )?;
        check(
            ["strip", "keep"].contains(&self.sessions.thinking_policy.as_str()),
            "sessions.thinking_policy",
            "\"strip\" or \"keep\"",
        )?;
        check(
            ["dark", "light"].contains(&self.ui.theme.as_str()),
            "ui.theme",
            "\"dark\" or \"light\"",
        )
    }
}

fn parse(path: &Path, text: &str) -> Result<toml::Table> {
    text.parse::<toml::Table>().map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(":{line}:{col}")
            })
            .unwrap_or_default();
        Error::Settings(format!("{}{at}: {}", path.display(), e.message().trim()))
    })
}

/// Lays `over` onto `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
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
