//! A tab's settings as one piece of plain data ([`TabSettings`]): everything a front end decides
//! for a tab's next turns, resolved (its config's layers, its preset, its own choices), sent whole
//! with [`crate::Command::Configure`] and kept whole by every engine. What an engine can refuse
//! of it, and the one sentence that says why, is [`TabSettings::check`] against the engine's
//! [`Capabilities`].

use crate::context::Overflow;
use crate::sampling::SamplingParams;
use crate::settings::Speculate;
use crate::tools::{ClientTool, ToolChoice, ToolSelection};

/// A tab's settings for its next turns.
#[derive(Debug, Clone, PartialEq)]
pub struct TabSettings {
    /// The system prompt (`None`: none; a blank one counts as none). A change rewinds the next
    /// turn to the conversation's header.
    pub system: Option<String>,
    /// How tokens are picked.
    pub sampling: SamplingParams,
    /// Most tokens per answer.
    pub max_new_tokens: usize,
    /// Texts that end an answer; they are never shown.
    pub stop: Vec<String>,
    /// Gemma 4 thinking. Turning it on or off changes the conversation's header, so the next
    /// turn re-prefills the history (`rewind`).
    pub thinking: bool,
    /// Most thought tokens per turn, over all its thought blocks (`None`: unbounded); ignored
    /// when thinking is off.
    pub thought_budget: Option<usize>,
    /// The context limit in tokens (`None`: the engine's, from its config); over the model's
    /// maximum it is refused.
    pub context: Option<usize>,
    /// What the tab does when its context fills up.
    pub overflow: Overflow,
    /// The tools declared to the model. A change of them changes the header (a rewind); a
    /// change of `tool_choice` alone does not.
    pub tools: ToolSelection,
    /// Whether the model may, must or must not call them.
    pub tool_choice: ToolChoice,
    /// Tools the front end answers itself (an API client's): when there are any, the model is
    /// declared these instead of the engine's own, and a call ends the turn
    /// ([`crate::TurnEnd::ToolCalls`]). A change of them changes the header.
    pub client_tools: Vec<ClientTool>,
    /// Speculative decoding.
    pub speculation: Speculation,
}

/// Speculative decoding for a tab's answers: drafts checked by the model in one step, kept only
/// where they are the tokens it picks, so the answer is the one plain decoding gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speculation {
    /// Where drafts come from.
    pub kind: Speculate,
    /// Most draft tokens checked in one step (1 to [`Speculation::MAX_DRAFT`]); the engine
    /// drafts fewer where fewer are accepted.
    pub draft_max: usize,
}

impl Speculation {
    /// The longest draft a step checks.
    pub const MAX_DRAFT: usize = 16;
}

impl Default for Speculation {
    /// Off, 8 tokens a step when on.
    fn default() -> Self {
        Self {
            kind: Speculate::Off,
            draft_max: 8,
        }
    }
}

impl Default for TabSettings {
    /// What a tab that was given no settings uses: greedy, 512 tokens an answer, no system
    /// prompt, no thinking, the engine's context, stop when it is full, every tool on `auto`.
    fn default() -> Self {
        Self {
            system: None,
            sampling: SamplingParams::greedy(),
            max_new_tokens: 512,
            stop: Vec::new(),
            thinking: false,
            thought_budget: None,
            context: None,
            overflow: Overflow::default(),
            tools: ToolSelection::All,
            tool_choice: ToolChoice::Auto,
            client_tools: Vec::new(),
            speculation: Speculation::default(),
        }
    }
}

/// What an engine can honour of a tab's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The model has a thinking mode.
    pub thinking: bool,
    /// The engine has tools configured.
    pub tools: bool,
    /// The model writes tool calls (Gemma 4), so a front end's own tools can be declared.
    pub calls: bool,
    /// The longest context the model takes (`None`: the engine does not choose it, a server
    /// keeps its own).
    pub max_context: Option<usize>,
    /// Whether the engine decodes speculatively.
    pub speculation: SpecSupport,
    /// A drafter model is loaded beside the target.
    pub drafter: bool,
}

/// Whether an engine can decode speculatively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecSupport {
    /// Yes, with the same answers as without.
    Exact,
    /// Not on this backend: its forward of several rows does not compute each row as a step of
    /// one does, so an answer could change.
    NotOnThisBackend,
    /// A server decides how it decodes.
    Remote,
}

/// A setting the engine cannot honour; the rest of the settings still apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A context of `asked` tokens, where the model takes 1 to `max`.
    Context {
        /// The limit asked for.
        asked: usize,
        /// The model's maximum.
        max: usize,
    },
    /// Thinking asked of a model without a thinking mode.
    NoThinking,
    /// `tool_choice = "required"` with no tools configured.
    NoTools,
    /// A front end's own tools, on a model that writes no tool calls.
    NoToolCalls,
    /// Speculation asked of an engine that cannot do it (see [`SpecSupport`]).
    NoSpeculation(SpecSupport),
    /// `kind = "drafter"` with no drafter loaded.
    NoDrafter,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Context { asked, max } => write!(
                f,
                "model.context_length = {asked} does not fit this model: allowed 1 to {max}"
            ),
            Refusal::NoThinking => {
                f.write_str("this model has no thinking mode; the setting has no effect")
            }
            Refusal::NoTools => f.write_str(
                "tool_choice = \"required\", but no tools are configured ([mcp.servers] or \
                 [tools] in the config)",
            ),
            Refusal::NoToolCalls => f.write_str(
                "tools of the front end's own need a model in this process that writes tool \
                 calls (Gemma 4 does): they are not declared to this one",
            ),
            // (`Exact` is never refused: it reads as the remote case.)
            Refusal::NoSpeculation(SpecSupport::Remote)
            | Refusal::NoSpeculation(SpecSupport::Exact) => f.write_str(
                "[speculate] does not apply to a remote engine: the server decides how it \
                     decodes",
            ),
            Refusal::NoSpeculation(SpecSupport::NotOnThisBackend) => f.write_str(
                "speculative decoding stays off on this backend and dtype: a check's rows are \
                 not computed exactly as plain steps compute them, so answers could change (it \
                 runs on the CPU backend in f32)",
            ),
            Refusal::NoDrafter => f.write_str(
                "speculate kind = \"drafter\", but no drafter model is loaded: prompt lookup \
                 drafts instead",
            ),
        }
    }
}

impl TabSettings {
    /// The system prompt, unless it is blank.
    pub fn system_prompt(&self) -> Option<&str> {
        self.system.as_deref().filter(|s| !s.trim().is_empty())
    }

    /// What of these settings an engine with `caps` cannot honour, in the order a user would
    /// fix them. The engine applies the settings all the same (a refused context keeps the one
    /// it had) and tells the front end each refusal.
    pub fn check(&self, caps: Capabilities) -> Vec<Refusal> {
        let mut out = Vec::new();
        if let (Some(asked), Some(max)) = (self.context, caps.max_context)
            && (asked == 0 || asked > max)
        {
            out.push(Refusal::Context { asked, max });
        }
        if self.thinking && !caps.thinking {
            out.push(Refusal::NoThinking);
        }
        let own = !self.client_tools.is_empty();
        if own && !caps.calls {
            out.push(Refusal::NoToolCalls);
        } else if self.tool_choice == ToolChoice::Required && !caps.tools && !own {
            out.push(Refusal::NoTools);
        }
        // `auto` asks for what the engine has, and nothing where it has none.
        let kind = self.speculation.kind;
        let named = matches!(kind, Speculate::Lookup | Speculate::Drafter);
        if named && caps.speculation != SpecSupport::Exact {
            out.push(Refusal::NoSpeculation(caps.speculation));
        } else if kind == Speculate::Drafter && !caps.drafter {
            out.push(Refusal::NoDrafter);
        }
        out
    }

    /// What [`TabSettings::check`] refuses of these settings, sent after `before`, less what
    /// `before` asked too: a front end that sends its settings again on every change hears of
    /// thinking or a required tool the engine cannot honour once, not at every change. A refused
    /// context is never applied, so it is said each time.
    pub fn refusals(&self, before: &TabSettings, caps: Capabilities) -> Vec<Refusal> {
        let mut out = self.check(caps);
        out.retain(|r| match r {
            Refusal::Context { .. } => true,
            Refusal::NoThinking => !before.thinking,
            Refusal::NoTools => before.tool_choice != ToolChoice::Required,
            Refusal::NoToolCalls => before.client_tools != self.client_tools,
            Refusal::NoSpeculation(_) => !matches!(
                before.speculation.kind,
                Speculate::Lookup | Speculate::Drafter
            ),
            Refusal::NoDrafter => before.speculation.kind != Speculate::Drafter,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Capabilities {
        Capabilities {
            thinking: false,
            tools: false,
            calls: false,
            max_context: Some(8192),
            speculation: SpecSupport::Exact,
            drafter: false,
        }
    }

    #[test]
    fn the_defaults_fit_any_engine() {
        assert!(TabSettings::default().check(caps()).is_empty());
    }

    #[test]
    fn each_refusal_is_named_once_and_in_order() {
        let s = TabSettings {
            context: Some(9000),
            thinking: true,
            tool_choice: ToolChoice::Required,
            ..TabSettings::default()
        };
        let r = s.check(caps());
        assert_eq!(
            r,
            vec![
                Refusal::Context {
                    asked: 9000,
                    max: 8192
                },
                Refusal::NoThinking,
                Refusal::NoTools
            ]
        );
        assert!(r[0].to_string().contains("allowed 1 to 8192"), "{}", r[0]);
        let zero = TabSettings {
            context: Some(0),
            ..TabSettings::default()
        };
        assert_eq!(zero.check(caps()).len(), 1);
        // A server keeps its own context: nothing to refuse.
        let server = Capabilities {
            max_context: None,
            ..caps()
        };
        assert!(zero.check(server).is_empty());
    }

    #[test]
    fn a_front_end_s_own_tools_need_a_model_that_calls_and_stand_for_configured_ones() {
        let own = TabSettings {
            client_tools: vec![ClientTool {
                name: "f".into(),
                description: String::new(),
                parameters: "{}".into(),
            }],
            tool_choice: ToolChoice::Required,
            ..TabSettings::default()
        };
        assert_eq!(own.check(caps()), vec![Refusal::NoToolCalls]);
        let calls = Capabilities {
            calls: true,
            ..caps()
        };
        // Required with the front end's tools: nothing configured in the engine is needed.
        assert!(own.check(calls).is_empty());
        assert!(own.refusals(&own, caps()).is_empty(), "said once");
    }

    #[test]
    fn a_refusal_is_said_once_but_a_refused_context_each_time() {
        let s = TabSettings {
            context: Some(9000),
            thinking: true,
            tool_choice: ToolChoice::Required,
            ..TabSettings::default()
        };
        let first = s.refusals(&TabSettings::default(), caps());
        assert_eq!(first.len(), 3);
        let again = s.refusals(&s, caps());
        assert_eq!(
            again,
            vec![Refusal::Context {
                asked: 9000,
                max: 8192
            }]
        );
    }

    #[test]
    fn speculation_is_refused_by_name_only_where_it_cannot_run() {
        let asked = |kind| TabSettings {
            speculation: Speculation {
                kind,
                ..Speculation::default()
            },
            ..TabSettings::default()
        };
        let on = |speculation| Capabilities {
            speculation,
            ..caps()
        };
        // `auto` asks for what there is: never refused.
        for support in [
            SpecSupport::Exact,
            SpecSupport::NotOnThisBackend,
            SpecSupport::Remote,
        ] {
            assert!(asked(Speculate::Auto).check(on(support)).is_empty());
        }
        let remote = asked(Speculate::Lookup).check(on(SpecSupport::Remote));
        assert_eq!(remote, vec![Refusal::NoSpeculation(SpecSupport::Remote)]);
        assert!(remote[0].to_string().contains("remote engine"));
        let backend = asked(Speculate::Lookup).check(on(SpecSupport::NotOnThisBackend));
        assert!(
            backend[0].to_string().contains("CPU backend in f32"),
            "{}",
            backend[0]
        );
        assert!(asked(Speculate::Lookup).check(caps()).is_empty());
        let drafter = asked(Speculate::Drafter).check(caps());
        assert_eq!(drafter, vec![Refusal::NoDrafter]);
        // Said once: sent again with the same kind, it is not repeated.
        let again = asked(Speculate::Drafter);
        assert!(again.refusals(&again, caps()).is_empty());
    }
}
