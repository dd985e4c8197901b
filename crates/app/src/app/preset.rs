//! Presets (`[presets.NAME]` in the config): `/preset NAME` gives the tab a system prompt,
//! sampling, thinking, an answer length and a tool choice together; new tabs take `ui.default_preset`.

use super::App;
use super::tab::{Message, Role};
use crate::config::Preset;
use gemma_protocol::Command;

impl App {
    /// The config's presets, by name.
    fn preset_names(&self) -> Vec<String> {
        self.config
            .as_ref()
            .map(|c| c.presets.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The preset new tabs take, if the config names one.
    pub(super) fn default_preset(&self) -> Option<String> {
        self.config
            .as_ref()
            .map(|c| c.ui.default_preset.clone())
            .filter(|p| !p.is_empty())
    }

    /// `/preset NAME` on the active tab (`/preset` alone lists them).
    pub(super) fn preset_command(&mut self, name: &str) -> Vec<Command> {
        let names = self.preset_names();
        if name.is_empty() {
            self.flash = Some(if names.is_empty() {
                "no presets: add [presets.NAME] to the config (see `gemma-chat config path`)".into()
            } else {
                format!("presets: {}; /preset NAME applies one", names.join(", "))
            });
            return Vec::new();
        }
        self.apply_preset(name, false)
    }

    /// The config's default preset for the tabs that have none yet (the first tab, which opens
    /// before the config is in).
    pub fn apply_default_preset(&mut self) -> Vec<Command> {
        let Some(name) = self.default_preset() else {
            return Vec::new();
        };
        let active = self.active;
        let mut cmds = Vec::new();
        for i in 0..self.tabs.len() {
            if self.tabs[i].preset.is_none() {
                self.active = i;
                cmds.extend(self.apply_preset(&name, true));
            }
        }
        self.active = active;
        cmds
    }

    /// Gives the active tab preset `name`; `quiet` leaves no notice (a new tab's default).
    pub(super) fn apply_preset(&mut self, name: &str, quiet: bool) -> Vec<Command> {
        let found = match self.config.as_ref() {
            Some(c) => c.preset(name).cloned(),
            None => Err(format!("no preset {name:?}: no config is loaded")),
        };
        let p = match found {
            Ok(p) => p,
            Err(why) => {
                self.flash = Some(why);
                return Vec::new();
            }
        };
        let Some(i) = (self.active < self.tabs.len()).then_some(self.active) else {
            return Vec::new();
        };
        if self.tabs[i].phase.busy() {
            self.flash = Some("stop the answer first (Esc), then change the preset".into());
            return Vec::new();
        }
        let can_think = self.model.thinking || !self.model.ready;
        let t = &mut self.tabs[i];
        t.preset = Some(name.to_string());
        t.choices.take_preset(&p, can_think);
        if let Some(n) = p.image_tokens {
            t.image_tokens = n;
        }
        if let Some(system) = &p.system
            && t.system() != Some(system.as_str())
        {
            t.set_system(Some(system.clone()));
        }
        if !quiet {
            let note = format!("preset {name}: {}", describe(&p));
            t.push(Message::new(Role::Notice, note));
        }
        let cmd = self.configure(&self.tabs[i]);
        self.save(i);
        vec![cmd]
    }
}

/// What a preset sets, in a line.
fn describe(p: &Preset) -> String {
    let mut parts = Vec::new();
    if p.system.is_some() {
        parts.push("system prompt".to_string());
    }
    if let Some(t) = p.temperature {
        parts.push(format!("temperature {t:.2}"));
    }
    if let Some(k) = p.top_k {
        parts.push(format!("top_k {k}"));
    }
    if let Some(v) = p.top_p {
        parts.push(format!("top_p {v:.2}"));
    }
    if let Some(v) = p.min_p {
        parts.push(format!("min_p {v:.2}"));
    }
    if let Some(s) = p.seed {
        parts.push(format!("seed {s}"));
    }
    if let Some(n) = p.image_tokens {
        parts.push(format!("pictures up to {n} tokens"));
    }
    if let Some(level) = p.thinking {
        parts.push(format!("thinking {}", level.name()));
    }
    if let Some(n) = p.max_new_tokens {
        parts.push(format!("{n} tokens"));
    }
    if let Some(c) = p.tool_choice {
        parts.push(format!("tool choice {}", c.as_str()));
    }
    if parts.is_empty() {
        "nothing set (the tab inherits everything)".into()
    } else {
        parts.join(", ")
    }
}
