//! Sampling settings in the UI: the layers they come from (tab, flag, env, file, model, built-in),
//! the command that tells the engine a tab's resolved values, and the per-tab settings popup.

use crossterm::event::{KeyCode, KeyEvent};

use super::tab::Tab;
use super::{App, Overlay};
use crate::config::keymap::Keymap;
use crate::config::sampling::{Knob, Resolved, SamplingLayer, Source, TEMPERATURE, TOP_K, TOP_P};
use crate::config::{Budgets, Config, Thinking};
use gemma_protocol::Command;

/// What new tabs start with, and the layers their sampling resolves through.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSettings {
    /// Flag, env and file layers, highest first.
    pub layers: Vec<(Source, SamplingLayer)>,
    /// The model's `generation_config.json` (known once it has loaded).
    pub model: SamplingLayer,
    /// Seed used where the settings say 0 (random).
    pub random_seed: u64,
    /// Most tokens per answer.
    pub max_new_tokens: usize,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Gemma 4 thinking for new tabs.
    pub thinking: Thinking,
    /// The thought tokens per turn of the named thinking levels.
    pub thinking_budgets: Budgets,
    /// A context limit for new tabs, set when the config's changed while the app runs.
    pub context_length: Option<usize>,
    /// What tabs do when their context fills up.
    pub overflow: gemma_protocol::Overflow,
    /// Speculative decoding for new tabs.
    pub speculation: gemma_protocol::Speculation,
}

impl TurnSettings {
    /// The sampling a tab with `overrides` (its F4 values, its preset's) gets, with the source
    /// of each value: the one resolver every front end uses.
    pub fn resolve(&self, overrides: SamplingLayer) -> Resolved {
        let mut layers = vec![(Source::Tab, overrides)];
        layers.extend(self.layers.iter().copied());
        layers.push((Source::Model, self.model));
        crate::config::sampling::resolve(&layers, self.random_seed)
    }
}

/// The fields the popup edits, in order.
const FIELDS: [Knob; 3] = [TEMPERATURE, TOP_P, TOP_K];

/// The settings popup's state: the field selected and the tab's overrides being edited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettingsEdit {
    /// Selected row.
    pub field: usize,
    /// The tab's overrides as edited.
    pub layer: SamplingLayer,
}

impl App {
    /// Applies a changed config file: sampling, stop strings, theme and keys take effect for the
    /// next turn; the model, backend, dtype and context length at the next start (and the app
    /// says so). An invalid keymap leaves everything as it was.
    pub(super) fn reload(&mut self, c: Config) -> Vec<Command> {
        let keymap = match Keymap::from_config(&c.ui.keys) {
            Ok(k) => k,
            Err(e) => {
                self.last_error = Some(format!("config not applied, the last good one stays: {e}"));
                return Vec::new();
            }
        };
        self.keymap = keymap;
        self.theme = c.ui.theme;
        self.show_thoughts = c.ui.show_thoughts;
        for (source, layer) in &mut self.settings.layers {
            if *source == Source::File {
                *layer = c.sampling_layer();
            }
        }
        self.settings.max_new_tokens = c.sampling.max_new_tokens;
        self.settings.stop = c.sampling.stop.clone();
        self.settings.thinking = c.model.thinking;
        self.settings.overflow = c.sessions.overflow();
        // Tabs at a named level take its new budget.
        self.settings.thinking_budgets = c.model.thinking_budgets;
        let old = self.config.as_ref().map(|o| o.model.clone());
        let restart = old.as_ref().is_some_and(|a| {
            let b = &c.model;
            (&a.path, &a.dtype, &a.backend) != (&b.path, &b.dtype, &b.backend)
        });
        let context = old
            .as_ref()
            .is_some_and(|a| a.context_length != c.model.context_length);
        if context {
            self.settings.context_length = Some(c.model.context_length);
        }
        self.flash = Some(match (restart, context) {
            (true, _) => "config reloaded; model, backend and dtype apply at the next start".into(),
            (false, true) => "config reloaded; the context length applies to new tabs".into(),
            _ => "config reloaded; it applies to the next turn".into(),
        });
        if self
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("config not applied"))
        {
            self.last_error = None;
        }
        self.config = Some(Box::new(c));
        self.configure_all()
    }

    /// A tab's sampling with the source of each value.
    pub fn tab_sampling(&self, tab: &Tab) -> Resolved {
        self.sampling_with(tab.choices.sampling)
    }

    fn sampling_with(&self, overrides: SamplingLayer) -> Resolved {
        self.settings.resolve(overrides)
    }

    /// The command that gives the engine a tab's settings, whole: its choices over the app's
    /// layers ([`TurnSettings::tab_settings`]), its first message as its system prompt. Every
    /// change of a tab's settings is told with it.
    pub(super) fn configure(&self, tab: &Tab) -> Command {
        // Until the model is known, thinking goes as chosen (a model without it says so once).
        let can_think = self.model.thinking || !self.model.ready;
        let settings = self
            .settings
            .tab_settings(&tab.choices, tab.system(), can_think);
        Command::Configure {
            tab: tab.id,
            settings: Box::new(settings),
        }
    }

    /// Every tab's settings again (after the model's defaults or the config changed).
    pub(super) fn configure_all(&self) -> Vec<Command> {
        self.tabs.iter().map(|t| self.configure(t)).collect()
    }

    /// Rows for the popup: name, value and where it comes from.
    pub fn settings_rows(&self, edit: &SettingsEdit) -> Vec<(String, String, Source)> {
        let r = self.sampling_with(edit.layer);
        let p = &r.params;
        vec![
            (
                "temperature".into(),
                format!("{:.2}", p.temperature),
                r.sources[0],
            ),
            ("top_p".into(), format!("{:.2}", p.top_p), r.sources[2]),
            ("top_k".into(), p.top_k.to_string(), r.sources[1]),
        ]
    }

    /// Keys in the settings popup: Up/Down pick, Left/Right change, `r` resets the field to
    /// what the tab inherits, Enter applies to the tab's next turns, Esc cancels.
    pub(super) fn settings_key(&mut self, mut e: SettingsEdit, k: &KeyEvent) -> Vec<Command> {
        let current = self.sampling_with(e.layer).params;
        let knob = FIELDS[e.field];
        let (value, step) = match e.field {
            0 => (current.temperature as f64, knob.step),
            1 => (current.top_p as f64, knob.step),
            _ => (current.top_k as f64, knob.step),
        };
        let mut set = |v: f64| {
            let v = knob.clamp(v);
            match e.field {
                0 => e.layer.temperature = Some(v as f32),
                1 => e.layer.top_p = Some(v as f32),
                _ => e.layer.top_k = Some(v as usize),
            }
        };
        match k.code {
            KeyCode::Up => e.field = e.field.saturating_sub(1),
            KeyCode::Down => e.field = (e.field + 1).min(FIELDS.len() - 1),
            KeyCode::Left | KeyCode::Char('-') => set(value - step),
            KeyCode::Right | KeyCode::Char('+') => set(value + step),
            KeyCode::Char('r') | KeyCode::Backspace | KeyCode::Delete => match e.field {
                0 => e.layer.temperature = None,
                1 => e.layer.top_p = None,
                _ => e.layer.top_k = None,
            },
            KeyCode::Enter => {
                let Some(i) = (self.active < self.tabs.len()).then_some(self.active) else {
                    return Vec::new();
                };
                self.tabs[i].choices.sampling = e.layer;
                self.flash = Some("settings apply to this tab's next turn".into());
                return vec![self.configure(&self.tabs[i])];
            }
            KeyCode::Esc => return Vec::new(),
            _ => {}
        }
        self.overlay = Overlay::Settings(e);
        Vec::new()
    }
}
