//! A conversation the engine made shorter (`Event::Compacted`), and `/compact`: the tab's path
//! becomes a new version of the conversation (the full one stays, ‹1/2› on its first message)
//! that starts with the summary, answering a short question (`SUMMARY_LEAD`: the request the
//! model was given is not kept), marked in its footer, or with
//! the first exchange a slide kept, and goes on with the kept exchanges and the message that
//! did not fit.

use super::App;
use super::persist;
use super::tab::{Message, Phase, Role, Tab};
use crate::config::thinking::grouped;
use gemma_protocol::{Command, Compaction, OverflowMode, TabId};

fn plural(n: usize, one: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    }
}

/// What the marked message says of a compaction.
pub fn describe(r: &Compaction) -> String {
    let sizes = format!("{} → {} tokens", grouped(r.before), grouped(r.after));
    let back = "←/→ on the first message: the full conversation";
    match r.mode {
        OverflowMode::Slide => format!(
            "context slid: {} left out before this one · {sizes} · {back}",
            plural(r.dropped, "oldest exchange")
        ),
        _ => {
            let dropped = match r.dropped {
                0 => String::new(),
                n => format!(
                    " ({} before them left out: too long to summarize)",
                    plural(n, "exchange")
                ),
            };
            format!(
                "compacted: {} summarized here{dropped} · {sizes} · summary turn reused {}, \
                 prefilled {} · {back}",
                plural(r.summarized, "earlier exchange"),
                grouped(r.reused),
                grouped(r.prefilled)
            )
        }
    }
}

/// Copies of the messages of the last `kept` exchanges of `messages` (from the `kept`-th last
/// user message on), with new ids to come.
fn kept_tail(messages: &[Message], kept: usize) -> Vec<Message> {
    if kept == 0 {
        return Vec::new();
    }
    let users: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i)
        .collect();
    let from = users[users.len().saturating_sub(kept)..]
        .first()
        .copied()
        .unwrap_or(messages.len());
    messages[from..]
        .iter()
        .cloned()
        .map(|mut m| {
            m.id = 0;
            m
        })
        .collect()
}

impl Tab {
    /// Moves the path to the shorter conversation `r` describes (see the module's header).
    fn compacted(&mut self, r: &Compaction) {
        let waiting = self
            .messages
            .last()
            .filter(|m| r.resumes && m.role == Role::User)
            .is_some();
        let pending = if waiting { self.messages.pop() } else { None };
        let kept = kept_tail(&self.messages, r.kept);
        let first = self
            .messages
            .iter()
            .position(|m| m.role != Role::System)
            .unwrap_or(self.messages.len());
        self.fork_at(first);
        let note = describe(r);
        match &r.summary {
            Some(summary) => {
                self.push(Message::new(Role::User, r.prompt.clone()));
                let mut m = Message::new(Role::Model, summary.clone());
                m.footer = Some(note.clone());
                self.push(m);
                kept.into_iter().for_each(|m| self.push(m));
            }
            None => kept.into_iter().for_each(|m| self.push(m)),
        }
        if let Some(mut m) = pending {
            m.id = 0;
            self.push(m);
        }
        // A slide's note goes on the first message it kept (the waiting one, when it kept none).
        if r.summary.is_none()
            && let Some(i) =
                (first..self.messages.len()).find(|&i| self.messages[i].role == Role::User)
        {
            self.messages[i].footer = Some(note);
            self.touched(i);
        }
        self.refresh_versions();
        self.context_used = r.after;
        if !r.resumes {
            self.phase = Phase::Idle;
        }
    }
}

impl App {
    /// `/compact`: the engine summarizes the older exchanges now.
    pub(super) fn compact(&mut self) -> Vec<Command> {
        let Some(t) = self.tab_mut() else {
            return Vec::new();
        };
        if t.phase.busy() {
            self.flash = Some("a turn is running in this tab: Esc stops it".into());
            return Vec::new();
        }
        if persist::exchanges(&t.messages).is_empty() {
            self.flash = Some("nothing to compact yet".into());
            return Vec::new();
        }
        t.phase = Phase::Waiting;
        let tab = t.id;
        self.flash = Some("compacting: the model summarizes the older exchanges…".into());
        vec![Command::Compact { tab }]
    }

    /// The engine made `tab`'s conversation shorter.
    pub(super) fn compacted(&mut self, tab: TabId, r: Compaction) {
        let shown = self.tab().is_some_and(|t| t.id == tab);
        let Some(t) = self.by_id(tab) else { return };
        t.compacted(&r);
        let what = match r.mode {
            OverflowMode::Slide => "context slid",
            _ => "context compacted",
        };
        self.flash = Some(match shown {
            true => format!(
                "{what}: the full conversation stays as version 1 (←/→ on the first message)"
            ),
            false => format!("{}: {what}", t.title),
        });
        if let Some(i) = self.tabs.iter().position(|t| t.id == tab) {
            self.save(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(mode: OverflowMode, kept: usize, resumes: bool) -> Compaction {
        Compaction {
            mode,
            prompt: "Summarize.".into(),
            summary: (mode == OverflowMode::Compact).then(|| "We spoke of cats.".into()),
            summarized: 2,
            dropped: if mode == OverflowMode::Slide { 2 } else { 0 },
            kept,
            before: 1234,
            after: 300,
            reused: 1200,
            prefilled: 20,
            resumes,
        }
    }

    fn tab() -> Tab {
        let mut t = Tab::new(1, "t".into(), Default::default());
        t.push(Message::new(Role::System, "Be brief."));
        for i in 1..=3 {
            t.push(Message::new(Role::User, format!("q{i}")));
            t.push(Message::new(Role::Model, format!("a{i}")));
        }
        t
    }

    fn texts(t: &Tab) -> Vec<String> {
        t.messages.iter().map(|m| m.text.clone()).collect()
    }

    #[test]
    fn a_compaction_starts_a_new_version_with_the_summary_and_the_kept_exchanges() {
        let mut t = tab();
        t.push(Message::new(Role::User, "q4"));
        t.phase = Phase::Waiting;
        t.compacted(&report(OverflowMode::Compact, 1, true));
        assert_eq!(
            texts(&t),
            [
                "Be brief.",
                "Summarize.",
                "We spoke of cats.",
                "q3",
                "a3",
                "q4"
            ]
        );
        assert_eq!(t.messages[1].versions, Some((2, 2)));
        assert!(
            t.messages[2]
                .footer
                .as_deref()
                .expect("marked")
                .starts_with("compacted: 2 earlier")
        );
        assert_eq!(t.phase, Phase::Waiting);
        let exchanges = persist::exchanges(&t.messages);
        assert_eq!(exchanges.len(), 3);
        assert_eq!(exchanges[0].answer, "We spoke of cats.");
        // The full conversation, without the message that did not fit, is the other version.
        assert_eq!(t.cycle_version(1, -1), Some((1, 2)));
        assert_eq!(texts(&t), ["Be brief.", "q1", "a1", "q2", "a2", "q3", "a3"]);
    }

    #[test]
    fn a_slide_keeps_the_newest_exchanges_marked_and_a_manual_compaction_ends_the_wait() {
        let mut t = tab();
        t.phase = Phase::Waiting;
        t.compacted(&report(OverflowMode::Slide, 1, false));
        assert_eq!(texts(&t), ["Be brief.", "q3", "a3"]);
        assert_eq!(t.messages[1].versions, Some((2, 2)));
        assert!(
            t.messages[1]
                .footer
                .as_deref()
                .expect("marked")
                .contains("2 oldest exchanges left out")
        );
        assert_eq!(t.phase, Phase::Idle);
        assert_eq!(t.context_used, 300);
    }

    #[test]
    fn a_slide_that_keeps_no_exchange_marks_the_waiting_message() {
        let mut t = tab();
        t.push(Message::new(Role::User, "q4"));
        t.phase = Phase::Waiting;
        let mut r = report(OverflowMode::Slide, 0, true);
        r.dropped = 3;
        t.compacted(&r);
        assert_eq!(texts(&t), ["Be brief.", "q4"]);
        assert_eq!(t.messages[1].versions, Some((2, 2)));
        let note = t.messages[1].footer.as_deref().expect("marked");
        assert!(note.contains("3 oldest exchanges left out"), "{note}");
    }
}
