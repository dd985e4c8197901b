//! A tab's settings as the engine gets them, built by one function for every front end (the TUI,
//! `--prompt`, piped chat): what the tab chose for itself ([`TabChoices`]: its preset's values,
//! its slash commands' and its flags') over the app's layers ([`TurnSettings`]), resolved into
//! the protocol's [`TabSettings`] by [`TurnSettings::tab_settings`].

use super::settings::TurnSettings;
use crate::config::sampling::SamplingLayer;
use crate::config::{Preset, Thinking};
use gemma_protocol::{Speculate, Speculation, TabSettings, ToolChoice, ToolSelection};

/// What a tab chose for itself, over the app's settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TabChoices {
    /// Its own sampling values (its preset's, its F4 edits), over the app's layers.
    pub sampling: SamplingLayer,
    /// Its own answer length (a preset's), over the app's.
    pub max_new_tokens: Option<usize>,
    /// Gemma 4 thinking for its next turns.
    pub thinking: Thinking,
    /// The tools it declares.
    pub tools: ToolSelection,
    /// Whether the model may, must or must not call them.
    pub tool_choice: ToolChoice,
    /// Its own context limit, when it differs from the engine's (set at its opening).
    pub context: Option<usize>,
    /// Its own speculative decoding kind (a preset's), over the app's.
    pub speculate: Option<Speculate>,
}

impl TabChoices {
    /// A new tab's: the app's thinking level and context limit for new tabs, every tool, and
    /// `tool_choice` (the config's, or a flag's).
    pub fn new(settings: &TurnSettings, tool_choice: ToolChoice) -> Self {
        Self {
            sampling: SamplingLayer::default(),
            max_new_tokens: None,
            thinking: settings.thinking,
            tools: ToolSelection::All,
            tool_choice,
            context: settings.context_length,
            speculate: None,
        }
    }

    /// Takes preset `p`: its sampling and answer length replace the tab's, its thinking level
    /// (where the model thinks: `can_think`) and tool choice where it names them. Its system
    /// prompt is the front end's to place (the TUI keeps it as the first message).
    pub fn take_preset(&mut self, p: &Preset, can_think: bool) {
        self.sampling = p.sampling_layer();
        self.max_new_tokens = p.max_new_tokens;
        if let Some(level) = p.thinking.filter(|_| can_think) {
            self.thinking = level;
        }
        if let Some(choice) = p.tool_choice {
            self.tool_choice = choice;
        }
        if let Some(kind) = p.speculate {
            self.speculate = Some(kind);
        }
    }
}

impl TurnSettings {
    /// The settings the engine gets for a tab that chose `c`, with `system` as its system
    /// prompt, on a model that thinks when `can_think` (else thinking is off: the engine would
    /// only refuse it; the tab keeps its level for a model that thinks): the one place a tab's
    /// settings are resolved.
    pub fn tab_settings(
        &self,
        c: &TabChoices,
        system: Option<&str>,
        can_think: bool,
    ) -> TabSettings {
        TabSettings {
            system: system.map(str::to_string),
            sampling: self.resolve(c.sampling).params,
            max_new_tokens: c.max_new_tokens.unwrap_or(self.max_new_tokens),
            stop: self.stop.clone(),
            thinking: c.thinking.is_on() && can_think,
            thought_budget: c.thinking.budget(&self.thinking_budgets),
            context: c.context,
            overflow: self.overflow.clone(),
            tools: c.tools.clone(),
            tool_choice: c.tool_choice,
            // The TUI's tools run on the engine's host.
            client_tools: Vec::new(),
            speculation: Speculation {
                kind: c.speculate.unwrap_or(self.speculation.kind),
                ..self.speculation
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::sampling::Source;

    fn settings() -> TurnSettings {
        let c = Config::builtin().expect("config");
        TurnSettings {
            layers: vec![(Source::File, c.sampling_layer())],
            model: SamplingLayer {
                temperature: Some(1.0),
                ..SamplingLayer::default()
            },
            random_seed: 7,
            max_new_tokens: 300,
            stop: vec!["END".into()],
            thinking: Thinking::Off,
            thinking_budgets: c.model.thinking_budgets,
            context_length: Some(4096),
            overflow: c.sessions.overflow(),
            speculation: c.speculate.speculation(),
        }
    }

    #[test]
    fn a_new_tab_takes_the_apps_settings() {
        let s = settings();
        let t = s.tab_settings(&TabChoices::new(&s, ToolChoice::Required), None, true);
        assert_eq!(t.max_new_tokens, 300);
        assert_eq!(t.stop, vec!["END".to_string()]);
        assert_eq!(t.context, Some(4096));
        assert_eq!(t.tool_choice, ToolChoice::Required);
        assert_eq!(t.sampling, s.resolve(SamplingLayer::default()).params);
        assert!(!t.thinking && t.thought_budget.is_none() && t.system.is_none());
    }

    #[test]
    fn a_preset_sets_what_it_names_and_nothing_else() {
        let s = settings();
        let mut c = TabChoices::new(&s, ToolChoice::Auto);
        let p = Preset {
            temperature: Some(0.2),
            thinking: Some(Thinking::Low),
            max_new_tokens: Some(64),
            ..Preset::default()
        };
        c.take_preset(&p, false);
        assert_eq!(
            c.thinking,
            Thinking::Off,
            "no thinking mode: the level stays"
        );
        c.take_preset(&p, true);
        let t = s.tab_settings(&c, Some("Be brief."), true);
        assert!(
            !s.tab_settings(&c, None, false).thinking,
            "no thinking mode: off"
        );
        assert_eq!(t.sampling.temperature, 0.2);
        assert_eq!(t.max_new_tokens, 64);
        assert!(t.thinking);
        assert_eq!(t.thought_budget, Some(s.thinking_budgets.low));
        assert_eq!(
            t.tool_choice,
            ToolChoice::Auto,
            "the preset names no tool choice"
        );
        assert_eq!(t.system.as_deref(), Some("Be brief."));
    }
}
