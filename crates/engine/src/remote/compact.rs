//! `/compact` on a server's model (`Command::Compact`), as the local engine does it: the tab's
//! older exchanges are sent with its summary request, the answer kept rather than shown; the
//! conversation then goes on from that summary (answering [`SUMMARY_LEAD`]) and the newest
//! exchange as it was, told with `Event::Compacted`. The summary's request shares the
//! conversation's start, so a server with a prompt cache reads it warm.

use super::answer::Budget;
use super::serve::{Server, after};
use super::turn::{TurnDone, TurnJob, estimate};
use super::wire::{self, ServerKind, TurnRequest};
use crate::error::Error;
use crate::protocol::{Compaction, Event, Exchange, OverflowMode, SUMMARY_LEAD, TabId, TurnEnd};

/// Exchanges a compaction keeps as they were (the newest).
const KEPT: usize = 1;

/// A compaction under way in a tab.
#[derive(Debug, Clone, Copy)]
pub(super) struct Compacting {
    /// Exchanges the summary covers (the oldest).
    pub summarized: usize,
    /// The conversation's tokens before.
    pub before: usize,
}

impl Server {
    /// Starts the summary of `tab`'s older exchanges.
    pub(super) fn compact(&mut self, tab: TabId) {
        let t = self.tabs.entry(tab).or_default();
        if t.busy() {
            return self.fail(tab, &Error::Busy.to_string());
        }
        let n = t.history.len();
        if n <= KEPT {
            return self.fail(
                tab,
                "nothing to compact yet: the conversation has no exchange before the newest",
            );
        }
        let summarized = n - KEPT;
        // A summary gets an eighth of the context, as the local engine gives it.
        let most = crate::compact::summary_tokens(self.info.context.unwrap_or(8192));
        let prompt = t.settings.overflow.prompt.clone();
        let pictures = &t.pictures[..summarized.min(t.pictures.len())];
        let replies = &t.replies[..summarized.min(t.replies.len())];
        let body = wire::body(&TurnRequest {
            model: &self.info.model,
            system: t.settings.system_prompt(),
            history: &t.history[..summarized],
            pictures,
            replies,
            tools: None,
            tool_choice: "none",
            user: (&prompt, &[]),
            sampling: &t.settings.sampling,
            max_tokens: most,
            stop: &[],
            thinking: false,
            thought_budget: (None, None),
            slot: None,
            kind: self.info.kind,
        });
        t.compacting = Some(Compacting {
            summarized,
            before: t.tokens,
        });
        let slot = match self.info.kind {
            ServerKind::LlamaServer => self.slot_for(tab),
            ServerKind::OpenAi | ServerKind::GemmaChat => None,
        };
        let messages_after = after(&body);
        self.spawn(TurnJob {
            tab,
            user: prompt,
            body,
            slot,
            budget: Budget::for_tokens(most),
            messages_after,
            quiet: true,
        });
    }

    /// The summary came back: the conversation goes on from it, and the UI is told.
    pub(super) fn compacted(&mut self, d: TurnDone, c: Compacting) {
        let tab = d.tab;
        let summary = d.answer.trim().to_string();
        match &d.end {
            Err(e) => {
                let why = self.client.scrub(&e.to_string());
                return self.fail(tab, &format!("the summary could not be written: {why}"));
            }
            Ok(TurnEnd::Cancelled) => return self.fail(tab, "compaction stopped"),
            Ok(_) if summary.is_empty() => {
                return self.fail(
                    tab,
                    "the server's summary came back empty: the conversation is as it was",
                );
            }
            Ok(_) => {}
        }
        let Some(t) = self.tabs.get_mut(&tab) else {
            return;
        };
        let kept = t.history.len() - c.summarized;
        let lead = Exchange {
            user: SUMMARY_LEAD.into(),
            answer: summary.clone(),
            ..Exchange::default()
        };
        t.history.splice(..c.summarized, [lead]);
        let at = c.summarized.min(t.pictures.len());
        t.pictures.splice(..at, [Vec::new()]);
        let at = c.summarized.min(t.replies.len());
        t.replies.splice(..at, [Vec::new()]);
        let messages = wire::messages(t.settings.system_prompt(), &t.history, &[], &[], None);
        t.tokens = estimate(&messages);
        let usage = d.usage.as_ref();
        let reused = usage.and_then(|u| u.cached_tokens).unwrap_or(0);
        let report = Compaction {
            mode: OverflowMode::Compact,
            prompt: SUMMARY_LEAD.into(),
            summary: Some(summary),
            summarized: c.summarized,
            dropped: 0,
            kept,
            before: c.before,
            after: t.tokens,
            reused,
            prefilled: usage.map_or(0, |u| u.prompt_tokens.saturating_sub(reused)),
            resumes: false,
        };
        let tokens = t.tokens;
        let _ = self.events.send(Event::Compacted { tab, report });
        let _ = self.events.send(Event::Committed { tab, tokens });
    }
}
