//! A user's file laid over the built-in one and read into [`Config`] in one pass: both are
//! parsed with every key's and value's place, the user's tables merged into the built-in ones
//! (a value replaces, a table merges key by key, so `[ui.keys] quit = …` changes only `quit`),
//! and the result deserialized once. Types, enums and ranges are refused by the deserializer;
//! the rules that span keys (URLs, preset names, key chords) after it. Every refusal names the
//! file, the line and column, and the key.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::action::Action;
use super::keymap::Chord;
use super::tools::is_env_name;
use super::{Config, DEFAULT_TOML};
use crate::error::{Error, Result};

/// The built-in configuration, or `user` (a file's path and text) laid over it.
pub(super) fn read(user: Option<(&Path, &str)>) -> Result<Config> {
    let builtin = |e: String| Error::Settings(format!("the built-in config: {e}"));
    let mut merged = DeTable::parse(DEFAULT_TOML).map_err(|e| builtin(e.message().into()))?;
    let Some((path, text)) = user else {
        let config = deserialize(merged).map_err(|e| builtin(e.message().into()))?;
        return Ok(config);
    };
    let refuse = |span: Option<std::ops::Range<usize>>, msg: String| {
        let at = span.map_or_else(String::new, |s| format!(":{}", place(text, s.start)));
        Error::Settings(format!("{}{at}: {msg}", path.display()))
    };
    let mine = DeTable::parse(text).map_err(|e| refuse(e.span(), flat(e.message())))?;
    merge(merged.get_mut(), mine.get_ref().clone());
    let mut config = deserialize(merged).map_err(|e| {
        let msg = flat(e.message());
        let key = e
            .span()
            .and_then(|s| key_at(mine.get_ref(), &s, ""))
            .filter(|_| !msg.starts_with("unknown field"));
        match key {
            Some(k) => refuse(e.span(), format!("`{k}`: {msg}")),
            None => refuse(e.span(), msg),
        }
    })?;
    config.context_length_set = find(mine.get_ref(), "model.context_length").is_some();
    let in_file = |key: &str| find(mine.get_ref(), key).is_some();
    check(&config, &in_file).map_err(|(key, msg)| refuse(find(mine.get_ref(), &key), msg))?;
    Ok(config)
}

fn deserialize(table: Spanned<DeTable<'_>>) -> std::result::Result<Config, toml::de::Error> {
    Config::deserialize(serde::de::IntoDeserializer::into_deserializer(table))
}

fn flat(msg: &str) -> String {
    msg.trim().replace('\n', " ")
}

/// Lays `over` on `base`: values replace, tables merge.
fn merge<'i>(base: &mut DeTable<'i>, over: DeTable<'i>) {
    for (key, value) in over {
        if let Some(slot) = base.get_mut(&key)
            && let (DeValue::Table(into), DeValue::Table(_)) = (slot.get_mut(), value.get_ref())
        {
            if let DeValue::Table(from) = value.into_inner() {
                merge(into, from);
            }
            continue;
        }
        base.insert(key, value);
    }
}

/// The dotted key whose name or value is at `span` in `table` (`prefix` names the table).
fn key_at(table: &DeTable<'_>, span: &std::ops::Range<usize>, prefix: &str) -> Option<String> {
    for (k, v) in table {
        let name = format!("{prefix}{}", k.get_ref());
        let (vs, ks) = (v.span(), k.span());
        if ks == *span || vs == *span {
            return Some(name);
        }
        if vs.start <= span.start && span.end <= vs.end {
            if let DeValue::Table(t) = v.get_ref() {
                return key_at(t, span, &format!("{name}.")).or(Some(name));
            }
            return Some(name);
        }
        if let DeValue::Table(t) = v.get_ref()
            && let Some(found) = key_at(t, span, &format!("{name}."))
        {
            return Some(found);
        }
    }
    None
}

/// The place of the value at dotted `key` in `table`, if the file sets it.
fn find(table: &DeTable<'_>, key: &str) -> Option<std::ops::Range<usize>> {
    let (head, rest) = match key.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (key, None),
    };
    let v = table.iter().find(|(k, _)| k.get_ref() == head)?.1;
    match (rest, v.get_ref()) {
        (None, _) => Some(v.span()),
        (Some(r), DeValue::Table(t)) => find(t, r),
        _ => None,
    }
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

/// A rule broken: the key it is about, and why.
type Broken = (String, String);

/// The rules that the types cannot say; `in_file` tells the keys the user's file sets (a
/// refusal points at those).
fn check(c: &Config, in_file: &dyn Fn(&str) -> bool) -> std::result::Result<(), Broken> {
    let broken = |key: &str, msg: String| Err((key.to_string(), msg));
    if !c.engine.url.is_empty()
        && let Err(why) = check_url(&c.engine.url)
    {
        return broken("engine.url", format!("`engine.url`: {why}"));
    }
    if !c.engine.api_key_env.is_empty() && !is_env_name(&c.engine.api_key_env) {
        // Never echo the value: it may be the key itself.
        return broken(
            "engine.api_key_env",
            "`engine.api_key_env` is the NAME of an environment variable (e.g. \
             \"OPENAI_API_KEY\"), not the key itself; put the key in that variable"
                .into(),
        );
    }
    let preset = &c.ui.default_preset;
    if !preset.is_empty() && !c.presets.contains_key(preset) {
        let known: Vec<&str> = c.presets.keys().map(String::as_str).collect();
        let known = if known.is_empty() {
            "this file defines no preset".to_string()
        } else {
            format!("presets: {}", known.join(", "))
        };
        return broken(
            "ui.default_preset",
            format!("`ui.default_preset` = {preset:?}: there is no [presets.{preset}] ({known})"),
        );
    }
    super::tools::check(c)?;
    check_keys(c, in_file)
}

/// `[ui.keys]`: known actions, readable chords, a key to quit, one action per chord.
fn check_keys(c: &Config, in_file: &dyn Fn(&str) -> bool) -> std::result::Result<(), Broken> {
    let broken = |key: &str, msg: String| Err((key.to_string(), msg));
    let mut bound: Vec<(Chord, &str, &str)> = Vec::new();
    for (name, chords) in &c.ui.keys {
        let key = format!("ui.keys.{name}");
        if Action::from_name(name).is_none() {
            return broken(&key, format!("`{key}`: there is no action `{name}`"));
        }
        if name == "quit" && chords.is_empty() {
            return broken(
                &key,
                format!("`{key}` is empty: there would be no key to quit"),
            );
        }
        let other = if name == "stop" { "interrupt" } else { "stop" };
        let unbound = |n: &str| c.ui.keys.get(n).is_none_or(Vec::is_empty);
        if matches!(name.as_str(), "stop" | "interrupt") && unbound(name) && unbound(other) {
            return broken(
                &key,
                format!(
                    "`{key}` and `ui.keys.{other}` are both empty: there would be no key to stop \
                     an answer"
                ),
            );
        }
        for text in chords {
            let Some(chord) = Chord::parse(text) else {
                return broken(
                    &key,
                    format!(
                        "`{key}`: cannot read the key \"{text}\" (e.g. \"ctrl+t\", \"alt+enter\", \"f1\" to \"f24\")"
                    ),
                );
            };
            if let Some((_, other, other_text)) =
                bound.iter().find(|(c, n, _)| *c == chord && n != name)
            {
                // Point at the binding the user's file made.
                let (at, mine, theirs) = if in_file(&key) {
                    (
                        key.clone(),
                        (name.as_str(), text.as_str()),
                        (*other, *other_text),
                    )
                } else {
                    (
                        format!("ui.keys.{other}"),
                        (*other, *other_text),
                        (name.as_str(), text.as_str()),
                    )
                };
                return broken(
                    &at,
                    format!(
                        "`ui.keys.{}`: \"{}\" is also the key of `{}` (\"{}\"); a key does one \
                         thing: bind one of them to another key",
                        mine.0, mine.1, theirs.0, theirs.1
                    ),
                );
            }
            bound.push((chord, name, text));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::super::sampling::MAX_NEW_TOKENS;
    use super::super::{Backend, Preset, SamplingConfig, Theme};
    use super::*;

    fn load(text: &str) -> Result<Config> {
        read(Some((Path::new("u.toml"), text)))
    }

    #[test]
    fn the_built_in_config_parses_and_validates() {
        let c = Config::builtin().expect("valid");
        assert_eq!(c.model.backend, Backend::Cpu);
        assert_eq!(c.sampling.temperature, None);
        assert_eq!(c.sampling.max_new_tokens as f64, MAX_NEW_TOKENS.default);
        assert!(c.ui.keys.contains_key("send"));
        assert!(!c.context_length_set);
    }

    #[test]
    fn a_user_file_overrides_only_what_it_sets() {
        let text = "[sampling]\ntemperature = 0.3\n[ui]\ntheme = \"light\"\n[ui.keys]\nquit = [\"ctrl+x\"]\n[model]\ncontext_length = 4096\n";
        let c = load(text).expect("valid");
        assert_eq!(c.sampling.temperature, Some(0.3));
        assert_eq!(c.ui.theme, Theme::Light);
        assert_eq!(c.ui.keys["quit"], vec!["ctrl+x".to_string()]);
        assert_eq!(c.ui.keys["send"], vec!["enter".to_string()]);
        assert_eq!(c.model.context_length, 4096);
        assert!(c.context_length_set);
    }

    #[test]
    fn bad_files_are_refused_with_the_place_and_the_rule() {
        let err = |text: &str| load(text).expect_err("invalid").to_string();
        let e = err("[sampling]\ntemperature = 3.0\n");
        assert!(
            e.contains("u.toml:2:15")
                && e.contains("`sampling.temperature`: 3 is out of range: allowed 0 to 2"),
            "{e}"
        );
        let e = err("[sampling]\ntemprature = 1.0\n");
        assert!(e.contains("temprature"), "{e}");
        let e = err("[model]\npath = \n");
        assert!(e.contains("u.toml:2:"), "{e}");
        let e = err("[presets.a]\ntop_p = 0\n");
        assert!(e.contains("`presets.a.top_p`: 0 is out of range"), "{e}");
        let e = err("[presets.a]\nimage_tokens = 300\n");
        assert!(e.contains("70, 140, 280, 560 or 1120"), "{e}");
        assert_eq!(
            load("[presets.a]\nimage_tokens = 560\n")
                .expect("valid")
                .presets["a"]
                .image_tokens,
            Some(560)
        );
        let e = err("[engine]\nconnect_timeout_s = 0\n");
        assert!(e.contains("u.toml:2:21") && e.contains("1 or more"), "{e}");
        let e = err("[ui.keys]\nquit = [\"ctrl+q\"]\nfly = [\"f9\"]\n");
        assert!(
            e.contains("u.toml:3:7") && e.contains("no action `fly`"),
            "{e}"
        );
        let e = err("model = 5\n");
        assert!(e.contains("u.toml:1:9") && e.contains("`model`"), "{e}");
        // Keys that leave no way out, or that no terminal sends (probe 2026-12-06, E22).
        let e = err("[ui.keys]\nquit = []\n");
        assert!(e.contains("no key to quit"), "{e}");
        let e = err("[ui.keys]\nstop = []\ninterrupt = []\n");
        assert!(e.contains("no key to stop an answer"), "{e}");
        load("[ui.keys]\ninterrupt = []\n").expect("Esc still stops");
        let e = err("[ui.keys]\nhelp = [\"f99\"]\n");
        assert!(e.contains("\"f99\"") && e.contains("f24"), "{e}");
    }

    /// The field names serde reads for `T` (a deserializer that only asks).
    fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        struct Ask(Option<&'static [&'static str]>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl serde::de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Stop
            }
        }
        impl<'de> serde::Deserializer<'de> for &mut Ask {
            type Error = Stop;
            fn deserialize_any<V: serde::de::Visitor<'de>>(
                self,
                _: V,
            ) -> std::result::Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> std::result::Result<V::Value, Stop> {
                self.0 = Some(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 char str string bytes byte_buf
                option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut ask = Ask(None);
        let _ = T::deserialize(&mut ask);
        ask.0.expect("a struct")
    }

    /// `config/default.toml` documents every key: each section's fields appear in it, set or
    /// commented out.
    #[test]
    fn the_default_file_lists_every_key() {
        let sections: [(&str, &[&str]); 9] = [
            ("[model]", fields::<super::super::ModelConfig>()),
            ("[engine]", fields::<super::super::EngineConfig>()),
            ("[sampling]", fields::<SamplingConfig>()),
            ("[sessions]", fields::<super::super::SessionsConfig>()),
            ("[ui]", fields::<super::super::UiConfig>()),
            ("[presets.", fields::<Preset>()),
            ("[tools]", fields::<super::super::ToolsConfig>()),
            ("[mcp.servers.", fields::<super::super::ServerConfig>()),
            ("", fields::<Config>()),
        ];
        for (header, keys) in sections {
            let at = DEFAULT_TOML
                .find(header)
                .unwrap_or_else(|| panic!("{header}"));
            let body = &DEFAULT_TOML[at..];
            for key in keys {
                let listed = body.lines().any(|raw| {
                    let l = raw.trim_start_matches(['#', ' ']);
                    l.starts_with(&format!("{key} "))
                        || l.starts_with(&format!("{key}="))
                        || raw.contains(&format!("[{key}"))
                        || raw.contains(&format!(".{key}]"))
                });
                assert!(
                    listed,
                    "config/default.toml does not list `{key}` under {header}"
                );
            }
        }
    }
}
