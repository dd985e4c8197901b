//! Keys as data: chords like `ctrl+t` parsed from the config's `[ui.keys]` into a lookup from a
//! key event to an [`Action`], and back to text for the help overlay.

use std::collections::BTreeMap;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::action::Action;
use crate::error::{Error, Result};

/// One key with its modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chord {
    /// The key.
    pub code: KeyCode,
    /// Ctrl, Alt, Shift.
    pub mods: KeyModifiers,
}

impl Chord {
    /// Parses `ctrl+t`, `alt+enter`, `f1`, `?`.
    pub fn parse(text: &str) -> Option<Self> {
        let lower = text.trim().to_ascii_lowercase();
        let (mods_part, key) = match lower.rfind('+') {
            Some(i) if i + 1 < lower.len() => (&lower[..i], &lower[i + 1..]),
            _ => ("", lower.as_str()),
        };
        let mut mods = KeyModifiers::NONE;
        for m in mods_part.split('+').filter(|m| !m.is_empty()) {
            mods |= match m {
                "ctrl" | "control" => KeyModifiers::CONTROL,
                "alt" | "meta" => KeyModifiers::ALT,
                "shift" => KeyModifiers::SHIFT,
                _ => return None,
            };
        }
        let code = match key {
            "enter" | "return" => KeyCode::Enter,
            "esc" | "escape" => KeyCode::Esc,
            "tab" => KeyCode::Tab,
            "backspace" => KeyCode::Backspace,
            "delete" | "del" => KeyCode::Delete,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            "pageup" | "pgup" => KeyCode::PageUp,
            "pagedown" | "pgdn" => KeyCode::PageDown,
            "space" => KeyCode::Char(' '),
            // F1 to F24: the function keys terminals send.
            f if f.starts_with('f') && f.len() > 1 => {
                KeyCode::F(f[1..].parse().ok().filter(|n| (1..=24).contains(n))?)
            }
            c if c.chars().count() == 1 => KeyCode::Char(c.chars().next()?),
            _ => return None,
        };
        Some(Self { code, mods }.normalized())
    }

    /// The chord of a key event.
    pub fn of(key: &KeyEvent) -> Self {
        Self {
            code: key.code,
            mods: key.modifiers & (KeyModifiers::CONTROL | KeyModifiers::ALT | KeyModifiers::SHIFT),
        }
        .normalized()
    }

    /// Characters carry their own case, so Shift is dropped from them; Ctrl+letter is lower case.
    fn normalized(mut self) -> Self {
        if let KeyCode::Char(c) = self.code {
            self.mods.remove(KeyModifiers::SHIFT);
            if self.mods.contains(KeyModifiers::CONTROL) {
                self.code = KeyCode::Char(c.to_ascii_lowercase());
            }
        }
        self
    }

    /// How the help overlay shows it, e.g. `Ctrl+T`.
    pub fn label(&self) -> String {
        let mut s = String::new();
        for (m, name) in [
            (KeyModifiers::CONTROL, "Ctrl+"),
            (KeyModifiers::ALT, "Alt+"),
            (KeyModifiers::SHIFT, "Shift+"),
        ] {
            if self.mods.contains(m) {
                s.push_str(name);
            }
        }
        let key = match self.code {
            KeyCode::Char(' ') => "Space".to_string(),
            KeyCode::Char(c) if !self.mods.is_empty() => c.to_ascii_uppercase().to_string(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::F(n) => format!("F{n}"),
            KeyCode::PageUp => "PgUp".into(),
            KeyCode::PageDown => "PgDn".into(),
            other => format!("{other:?}"),
        };
        s + &key
    }

    /// A plain character or Home/End: keys the input line owns while it has text.
    pub fn belongs_to_input(&self) -> bool {
        self.mods.is_empty() && matches!(self.code, KeyCode::Char(_) | KeyCode::Home | KeyCode::End)
    }
}

/// Key events → actions.
#[derive(Debug, Clone, Default)]
pub struct Keymap {
    map: Vec<(Chord, Action)>,
}

impl Keymap {
    /// Builds the map from `[ui.keys]`; an unknown action or key names itself.
    pub fn from_config(keys: &BTreeMap<String, Vec<String>>) -> Result<Self> {
        let mut map = Vec::new();
        for (name, chords) in keys {
            let action = Action::from_name(name)
                .ok_or_else(|| Error::Settings(format!("ui.keys: unknown action `{name}`")))?;
            for text in chords {
                let chord = Chord::parse(text).ok_or_else(|| {
                    Error::Settings(format!("ui.keys.{name}: cannot read the key `{text}`"))
                })?;
                map.retain(|(c, _)| *c != chord);
                map.push((chord, action));
            }
        }
        Ok(Self { map })
    }

    /// The action bound to `key`.
    pub fn action(&self, key: &KeyEvent) -> Option<Action> {
        let chord = Chord::of(key);
        self.map.iter().find(|(c, _)| *c == chord).map(|(_, a)| *a)
    }

    /// Every action with its keys, in a stable order, for the help overlay.
    pub fn bindings(&self) -> Vec<(Action, Vec<String>)> {
        let mut by: BTreeMap<Action, Vec<String>> = BTreeMap::new();
        for (c, a) in &self.map {
            by.entry(*a).or_default().push(c.label());
        }
        by.into_iter().collect()
    }

    /// The first key bound to `action`, for hints.
    pub fn key_for(&self, action: Action) -> Option<String> {
        self.map
            .iter()
            .find(|(_, a)| *a == action)
            .map(|(c, _)| c.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_parse_and_match_key_events() {
        let c = Chord::parse("ctrl+t").expect("parses");
        let ev = KeyEvent::new(KeyCode::Char('t'), KeyModifiers::CONTROL);
        assert_eq!(Chord::of(&ev), c);
        let q = Chord::parse("?").expect("parses");
        let ev = KeyEvent::new(KeyCode::Char('?'), KeyModifiers::SHIFT);
        assert_eq!(Chord::of(&ev), q);
        assert_eq!(
            Chord::parse("alt+enter").map(|c| c.label()),
            Some("Alt+Enter".into())
        );
        assert_eq!(Chord::parse("f12").map(|c| c.code), Some(KeyCode::F(12)));
        assert!(Chord::parse("hyper+x").is_none());
        // No terminal sends F0 or F99.
        assert_eq!(Chord::parse("f24").map(|c| c.code), Some(KeyCode::F(24)));
        assert!(Chord::parse("f99").is_none() && Chord::parse("f0").is_none());
    }

    #[test]
    fn the_default_keymap_loads_and_bad_keys_are_named() {
        let cfg = crate::config::Config::builtin().expect("config");
        let km = Keymap::from_config(&cfg.ui.keys).expect("keymap");
        let ev = KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(km.action(&ev), Some(Action::Send));
        let mut keys = cfg.ui.keys.clone();
        keys.insert("fly".into(), vec!["f1".into()]);
        let e = Keymap::from_config(&keys).expect_err("unknown").to_string();
        assert!(e.contains("fly"), "{e}");
        let mut keys = cfg.ui.keys;
        keys.insert("quit".into(), vec!["ctrl+nope".into()]);
        let e = Keymap::from_config(&keys).expect_err("bad key").to_string();
        assert!(e.contains("ctrl+nope"), "{e}");
    }
}
