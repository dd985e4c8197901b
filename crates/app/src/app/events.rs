//! Engine events into the UI state: loading, prefill progress, streamed text and thoughts,
//! finished turns with their stats, tier changes and failures.

use super::tab::{Message, Phase, Role};
use super::{App, Loading};
use gemma_protocol::SamplingLayer;
use gemma_protocol::{Command, Event, TabId, TurnEnd, TurnStats};

impl App {
    fn save_tab(&mut self, tab: TabId) {
        if let Some(i) = self.tabs.iter().position(|t| t.id == tab) {
            self.save(i);
        }
    }

    /// The model is loaded: its defaults join the sampling layers, and turns typed while it
    /// loaded go now.
    fn ready(
        &mut self,
        model: String,
        context_length: usize,
        thinking: bool,
        generation: SamplingLayer,
    ) -> Vec<Command> {
        if self.model.name.is_empty() {
            self.model.name = model;
        }
        self.model.context_limit = context_length;
        self.model.thinking = thinking;
        self.model.ready = true;
        self.settings.model = generation;
        let mut cmds = self.configure_all();
        cmds.append(&mut self.pending);
        cmds
    }

    /// A turn or a command failed in `tab`: the turn ends, marked, and the error is shown.
    fn failed(&mut self, tab: TabId, error: String) {
        if let Some(t) = self.by_id(tab) {
            t.tools_ended();
            if t.phase.busy() {
                t.failed = true;
                t.phase = Phase::Idle;
                if let Some(m) = t.messages.last_mut().filter(|m| m.role == Role::Model) {
                    // What came before the failure stays, marked as cut off.
                    let mark = if m.text.is_empty() {
                        "failed"
                    } else {
                        "cut off: the turn failed"
                    };
                    m.footer.get_or_insert_with(|| mark.into());
                    t.touched(t.messages.len() - 1);
                }
            }
            t.push(Message::new(Role::Error, error.clone()));
        }
        self.last_error = Some(error);
        self.save_tab(tab);
    }

    /// One engine event into the state; what it asks of the engine in return.
    pub(super) fn engine(&mut self, e: Event) -> Vec<Command> {
        match e {
            Event::Loading {
                stage,
                done,
                total,
                unit,
            } => {
                self.model.loading = Loading {
                    stage,
                    done,
                    total,
                    unit,
                }
            }
            Event::Ready {
                model,
                context_length,
                thinking,
                generation,
                ..
            } => return self.ready(model, context_length, thinking, generation),
            Event::EngineStopped { error } => self.engine_stopped(error),
            Event::LoadFailed { error } => self.load_failed(error),
            Event::Failed { tab, error } => self.failed(tab, error),
            Event::TemplateFallback { tab, error } => self.template_fallback(tab, error),
            Event::Notice { tab, text } => self.notice(tab, text),
            Event::Rebased {
                tab,
                tokens,
                common,
            } => self.rebased(tab, tokens, common),
            Event::Finished { tab, end, stats } => self.finished(tab, end, stats),
            Event::Tools { servers, tools } => self.catalogue(servers, tools),
            Event::ToolCall {
                tab,
                call,
                approval,
            } => self.tool_call(tab, call, approval),
            Event::ToolResult { tab, outcome } => self.tool_result(tab, outcome),
            Event::Compacted { tab, report } => self.compacted(tab, report),
            e => self.tab_event(e),
        }
        Vec::new()
    }

    /// The events that only update their tab: progress, text, context, tier.
    fn tab_event(&mut self, e: Event) {
        let now = self.now;
        let Some(t) = e.tab().and_then(|tab| self.by_id(tab)) else {
            return;
        };
        match e {
            Event::Prefill {
                done,
                total,
                reused,
                ..
            } => {
                t.phase = Phase::Prefilling { done, total };
                t.context_used = reused + done;
            }
            Event::Token { text, .. } => {
                t.generated(now);
                t.answer().text.push_str(&text);
            }
            Event::Thought { text, tokens, .. } => {
                t.generated(now);
                t.thought_tokens = tokens;
                let note = t.thought_note();
                let answer = t.answer();
                answer.thought.push_str(&text);
                answer.live = note;
            }
            Event::Committed { tokens, .. } => t.context_used = tokens,
            Event::TabState { tier, .. } => t.tier = tier,
            _ => {}
        }
    }

    /// The engine thread ended on a bug: every running turn fails with its message.
    fn engine_stopped(&mut self, error: String) {
        if !self.model.ready {
            self.model.load_error = Some(error.clone());
        }
        self.model.ready = false;
        let busy: Vec<TabId> = self
            .tabs
            .iter()
            .filter(|t| t.phase.busy())
            .map(|t| t.id)
            .collect();
        let active = self.tab().map(|t| t.id);
        for &tab in &busy {
            self.failed(tab, error.clone());
        }
        if let Some(t) = self
            .tab_mut()
            .filter(|_| !busy.iter().any(|b| Some(*b) == active))
        {
            t.push(Message::new(Role::Error, error.clone()));
        }
        self.last_error = Some(error);
    }

    /// The model could not be loaded: every tab is marked.
    fn load_failed(&mut self, error: String) {
        self.model.load_error = Some(error.clone());
        self.last_error = Some(error);
        for t in &mut self.tabs {
            t.phase = Phase::Idle;
            t.failed = true;
        }
    }

    /// A turn ended: its footer and stats, and the tab saved.
    fn finished(&mut self, tab: TabId, end: TurnEnd, stats: TurnStats) {
        if let Some(t) = self.by_id(tab) {
            t.phase = Phase::Idle;
            t.tools_ended();
            let mut footer = format!(
                "{} · {} · reused {} · prefilled {} · {:.1} tok/s",
                end.describe(),
                stats.reuse.as_str(),
                stats.reused_tokens,
                stats.prefilled_tokens,
                stats.decode_tok_s
            );
            if stats.tool_calls > 0 {
                let calls = match stats.tool_calls {
                    1 => "1 tool call".to_string(),
                    n => format!("{n} tool calls"),
                };
                footer.push_str(&format!(
                    " · {calls}, {} result tokens fed warm",
                    stats.tool_tokens
                ));
            }
            if let Some(spec) = stats.speculation {
                footer.push_str(&format!(" · {}", spec.summary()));
            }
            if stats.thought_tokens > 0 {
                t.thought_tokens = stats.thought_tokens;
            }
            if let Some(note) = t.thought_note() {
                footer.push_str(&format!(" · {note}"));
            }
            let answer = t.answer();
            answer.live = None;
            answer.footer = Some(footer);
            answer.stats = Some(stats.clone());
            t.last_stats = Some(stats);
        }
        self.save_tab(tab);
    }

    fn template_fallback(&mut self, tab: TabId, error: String) {
        self.model.template_fallback = true;
        if let Some(t) = self.by_id(tab) {
            t.push(Message::new(
                Role::Notice,
                format!("{error}; the model's built-in layout is used instead"),
            ));
        }
    }

    /// A note on a tab's turn, in the status line (it does not interrupt the answer).
    fn notice(&mut self, tab: TabId, text: String) {
        let shown = self.tab().is_some_and(|t| t.id == tab);
        self.flash = Some(match self.by_id(tab) {
            Some(t) if !shown => format!("{}: {text}", t.title),
            _ => text,
        });
    }

    /// The tab follows another path: said for a switch of versions (an edit's turn says it in
    /// its footer).
    fn rebased(&mut self, tab: TabId, tokens: usize, common: usize) {
        let shown = self.tab().is_some_and(|t| t.id == tab && !t.phase.busy());
        if let Some(t) = self.by_id(tab) {
            t.context_used = tokens;
        }
        if shown {
            self.flash = Some(format!(
                "rewind: {common}/{tokens} tokens stay cached, {} to prefill",
                tokens.saturating_sub(common)
            ));
        }
    }
}
