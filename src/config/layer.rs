//! One TOML file as written, every value with its place in the file: unknown keys, wrong types
//! and out-of-range values are refused here with `file:line:column`, the key and the rule.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};

/// A number as TOML writes it (`1` or `1.0`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum Num {
    /// `1`.
    Int(i64),
    /// `1.0`.
    Float(f64),
}

impl Num {
    /// As a float.
    pub fn f(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// `[model]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ModelTable {
    pub path: Option<Spanned<String>>,
    pub dtype: Option<Spanned<String>>,
    pub backend: Option<Spanned<String>>,
    pub context_length: Option<Spanned<i64>>,
    pub thinking: Option<Spanned<bool>>,
}

/// `[engine]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct EngineTable {
    pub kind: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub model: Option<Spanned<String>>,
    pub api_key_env: Option<Spanned<String>>,
    pub connect_timeout_s: Option<Spanned<i64>>,
    pub first_byte_timeout_s: Option<Spanned<i64>>,
}

/// `[sampling]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SamplingTable {
    pub temperature: Option<Spanned<Num>>,
    pub top_k: Option<Spanned<i64>>,
    pub top_p: Option<Spanned<Num>>,
    pub min_p: Option<Spanned<Num>>,
    pub seed: Option<Spanned<i64>>,
    pub max_new_tokens: Option<Spanned<i64>>,
    pub stop: Option<Spanned<Vec<String>>>,
}

/// `[sessions]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SessionsTable {
    pub memory_budget_mb: Option<Spanned<i64>>,
    pub host_budget_mb: Option<Spanned<i64>>,
    pub thinking_policy: Option<Spanned<String>>,
    pub kv_disk_mb: Option<Spanned<i64>>,
    pub keep_closed_days: Option<Spanned<i64>>,
}

/// `[ui]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct UiTable {
    pub default_preset: Option<Spanned<String>>,
    pub theme: Option<Spanned<String>>,
    pub show_thoughts: Option<Spanned<bool>>,
    pub keys: Option<BTreeMap<String, Spanned<Vec<String>>>>,
}

/// `[presets.NAME]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PresetTable {
    pub system: Option<Spanned<String>>,
    pub temperature: Option<Spanned<Num>>,
    pub top_k: Option<Spanned<i64>>,
    pub top_p: Option<Spanned<Num>>,
    pub min_p: Option<Spanned<Num>>,
    pub seed: Option<Spanned<i64>>,
    pub thinking: Option<Spanned<bool>>,
    pub max_new_tokens: Option<Spanned<i64>>,
}

/// A whole file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ConfigLayer {
    pub model: Option<ModelTable>,
    pub engine: Option<EngineTable>,
    pub sampling: Option<SamplingTable>,
    pub sessions: Option<SessionsTable>,
    pub ui: Option<UiTable>,
    pub presets: Option<BTreeMap<String, PresetTable>>,
}

/// `line:column` (1-based) of byte `at` in `text`.
fn place(text: &str, at: usize) -> String {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    format!("{line}:{col}")
}

impl ConfigLayer {
    /// Parses and checks `text` (the file at `path`).
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let layer: ConfigLayer = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map_or_else(String::new, |s| format!(":{}", place(text, s.start)));
            let msg = e.message().trim().replace("\n", " ");
            Error::Settings(format!("{}{at}: {msg}", path.display()))
        })?;
        layer.check().map_err(|(span, msg)| {
            Error::Settings(format!(
                "{}:{}: {msg}",
                path.display(),
                place(text, span.start)
            ))
        })?;
        Ok(layer)
    }

    /// Range checks; the error is the offending value's span and the message.
    fn check(&self) -> Check {
        if let Some(m) = &self.model {
            m.check()?;
        }
        if let Some(e) = &self.engine {
            e.check()?;
        }
        if let Some(s) = &self.sampling {
            s.check()?;
        }
        if let Some(s) = &self.sessions {
            s.check()?;
        }
        for (name, p) in self.presets.iter().flatten() {
            p.check(name)?;
        }
        if let Some(d) = self.ui.as_ref().and_then(|u| u.default_preset.as_ref())
            && !d.get_ref().is_empty()
            && !self
                .presets
                .as_ref()
                .is_some_and(|p| p.contains_key(d.get_ref()))
        {
            let known: Vec<&str> = self
                .presets
                .iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect();
            return Err((
                d.span(),
                format!(
                    "`ui.default_preset` = {:?}: there is no [presets.{}] ({})",
                    d.get_ref(),
                    d.get_ref(),
                    if known.is_empty() {
                        "this file defines no preset".to_string()
                    } else {
                        format!("presets: {}", known.join(", "))
                    }
                ),
            ));
        }
        if let Some(u) = &self.ui {
            u.check()?;
        }
        Ok(())
    }
}

impl ModelTable {
    fn check(&self) -> Check {
        one_of(&self.dtype, "model.dtype", &["auto", "f32", "f16", "bf16"])?;
        one_of(&self.backend, "model.backend", &crate::backend::BACKENDS)?;
        int(
            &self.context_length,
            "model.context_length",
            1,
            "from 1 up to the model's maximum",
        )?;
        Ok(())
    }
}

impl EngineTable {
    fn check(&self) -> Check {
        one_of(&self.kind, "engine.kind", &["local", "remote"])?;
        if let Some(u) = &self.url
            && !u.get_ref().is_empty()
            && let Err(why) = check_url(u.get_ref())
        {
            return Err((u.span(), format!("`engine.url`: {why}")));
        }
        if let Some(k) = &self.api_key_env
            && !k.get_ref().is_empty()
            && !is_env_name(k.get_ref())
        {
            // Never echo the value: it may be the key itself.
            return Err((
                k.span(),
                "`engine.api_key_env` is the NAME of an environment variable (e.g. \
                 \"OPENAI_API_KEY\"), not the key itself; put the key in that variable"
                    .into(),
            ));
        }
        int(
            &self.connect_timeout_s,
            "engine.connect_timeout_s",
            1,
            "1 or more",
        )?;
        int(
            &self.first_byte_timeout_s,
            "engine.first_byte_timeout_s",
            1,
            "1 or more",
        )?;
        Ok(())
    }
}

/// Why `url` is not a server's base URL (`http://` or `https://`, a host, no query).
pub fn check_url(url: &str) -> std::result::Result<(), String> {
    let u = url::Url::parse(url).map_err(|e| format!("cannot read {url:?} as a URL ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("{url:?} must start with http:// or https://"));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("put no credentials in the URL; use api_key_env".into());
    }
    Ok(())
}

/// Whether `s` can be an environment variable's name.
fn is_env_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 128
}

impl PresetTable {
    fn check(&self, name: &str) -> Check {
        sampling_ranges(
            &format!("presets.{name}"),
            &self.temperature,
            &self.top_k,
            &self.top_p,
            &self.min_p,
            &self.seed,
            &self.max_new_tokens,
        )
    }
}

impl SamplingTable {
    fn check(&self) -> Check {
        sampling_ranges(
            "sampling",
            &self.temperature,
            &self.top_k,
            &self.top_p,
            &self.min_p,
            &self.seed,
            &self.max_new_tokens,
        )
    }
}

/// The sampling values' ranges, for `[sampling]` and each preset (`table` names it).
fn sampling_ranges(
    table: &str,
    temperature: &Option<Spanned<Num>>,
    top_k: &Option<Spanned<i64>>,
    top_p: &Option<Spanned<Num>>,
    min_p: &Option<Spanned<Num>>,
    seed: &Option<Spanned<i64>>,
    max_new_tokens: &Option<Spanned<i64>>,
) -> Check {
    let key = |k: &str| format!("{table}.{k}");
    num(
        temperature,
        &key("temperature"),
        |t| (0.0..=2.0).contains(&t),
        "0 to 2 (0 is greedy)",
    )?;
    int(top_k, &key("top_k"), 0, "0 or more (0 is off)")?;
    num(top_p, &key("top_p"), |p| p > 0.0 && p <= 1.0, "in (0, 1]")?;
    num(
        min_p,
        &key("min_p"),
        |p| (0.0..=1.0).contains(&p),
        "in [0, 1]",
    )?;
    int(seed, &key("seed"), 0, "0 or more (0 is a random seed)")?;
    int(max_new_tokens, &key("max_new_tokens"), 1, "1 or more")?;
    Ok(())
}

impl SessionsTable {
    fn check(&self) -> Check {
        int(
            &self.memory_budget_mb,
            "sessions.memory_budget_mb",
            0,
            "0 or more (0 is no limit)",
        )?;
        int(
            &self.host_budget_mb,
            "sessions.host_budget_mb",
            0,
            "0 or more (0 is no limit)",
        )?;
        int(
            &self.kv_disk_mb,
            "sessions.kv_disk_mb",
            0,
            "0 or more (0 turns warm restart off)",
        )?;
        int(
            &self.keep_closed_days,
            "sessions.keep_closed_days",
            0,
            "0 or more (0 keeps closed chats for ever)",
        )?;
        one_of(
            &self.thinking_policy,
            "sessions.thinking_policy",
            &["strip", "keep"],
        )?;
        Ok(())
    }
}

impl UiTable {
    fn check(&self) -> Check {
        one_of(&self.theme, "ui.theme", &["dark", "light"])?;
        for (name, chords) in self.keys.iter().flatten() {
            if name == "quit" && chords.get_ref().is_empty() {
                return Err((
                    chords.span(),
                    "`ui.keys.quit` is empty: there would be no key to quit".into(),
                ));
            }
            if super::action::Action::from_name(name).is_none() {
                return Err((
                    chords.span(),
                    format!("`ui.keys.{name}`: there is no action `{name}`"),
                ));
            }
            for c in chords.get_ref() {
                if super::keymap::Chord::parse(c).is_none() {
                    return Err((
                        chords.span(),
                        format!(
                            "`ui.keys.{name}`: cannot read the key \"{c}\" (e.g. \"ctrl+t\", \"alt+enter\", \"f1\")"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A value refused: where it is in the file, and why.
type Check = std::result::Result<(), (std::ops::Range<usize>, String)>;

fn num(v: &Option<Spanned<Num>>, key: &str, ok: impl Fn(f64) -> bool, rule: &str) -> Check {
    match v {
        Some(s) if !ok(s.get_ref().f()) => Err((
            s.span(),
            format!(
                "`{key}` = {} is out of range: allowed {rule}",
                s.get_ref().f()
            ),
        )),
        _ => Ok(()),
    }
}
fn int(v: &Option<Spanned<i64>>, key: &str, min: i64, rule: &str) -> Check {
    match v {
        Some(s) if *s.get_ref() < min => Err((
            s.span(),
            format!("`{key}` = {} is out of range: allowed {rule}", s.get_ref()),
        )),
        _ => Ok(()),
    }
}
fn one_of(v: &Option<Spanned<String>>, key: &str, allowed: &[&str]) -> Check {
    match v {
        Some(s) if !allowed.contains(&s.get_ref().as_str()) => Err((
            s.span(),
            format!(
                "`{key}` = \"{}\" is not allowed: use {}",
                s.get_ref(),
                allowed
                    .iter()
                    .map(|a| format!("\"{a}\""))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        )),
        _ => Ok(()),
    }
}
