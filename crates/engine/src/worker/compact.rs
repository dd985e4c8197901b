//! A tab whose context fills up goes on instead of stopping: before a turn whose prompt passes
//! the tab's overflow share, the engine compacts the conversation (a summary turn over the older
//! exchanges, run warm on the resident prefix, then a new path: the summary and the newest
//! exchanges) or slides it (the oldest exchanges dropped), tells the front end
//! ([`Event::Compacted`]) and sends the message again. `/compact` does it on demand.

use super::Worker;
use crate::branch::{self, Held, Setting};
use crate::compact::{
    Plan, Sizes, least_summary_tokens, overflows, plan_compact, plan_slide, summary_tokens,
};
use crate::error::{Error, Result};
use crate::job::{Job, Pending, Resume};
use crate::protocol::{
    Compaction, Event, Exchange, OverflowMode, SUMMARY_LEAD, TabId, TurnEnd, TurnStats,
};

/// What a compaction or slide did, before the figures of the new path are known.
struct Outcome {
    mode: OverflowMode,
    summary: Option<String>,
    /// The summary as it was sampled (its thought left out): the new path holds these ids.
    summary_ids: Vec<u32>,
    summarized: usize,
    dropped: usize,
    before: usize,
    resume: Option<Resume>,
    stats: Option<TurnStats>,
}

impl Outcome {
    /// The `dropped` oldest exchanges left out, nothing summarized.
    fn slide(dropped: usize, before: usize, resume: Option<Resume>) -> Self {
        Self {
            mode: OverflowMode::Slide,
            summary: None,
            summary_ids: Vec::new(),
            summarized: 0,
            dropped,
            before,
            resume,
            stats: None,
        }
    }
}

impl Worker<'_> {
    /// Whether a prompt of `len` tokens in `tab` calls for its overflow policy: past its share
    /// of the context, or (the last round) past the context.
    pub(super) fn overflowing(&mut self, tab: TabId, len: usize, rounds: u8) -> bool {
        let t = self.tab(tab);
        let at = if rounds > 1 {
            t.settings.overflow.at
        } else {
            1.0
        };
        t.settings.overflow.mode != OverflowMode::Stop
            && t.held.as_ref().is_some_and(|h| !h.is_empty())
            && overflows(len, t.context, at)
    }

    /// `/compact`: summarizes the older exchanges now, whatever the tab's policy.
    pub(super) fn compact_now(&mut self, tab: TabId) -> Result<()> {
        if self.compact(tab, 0, None)? {
            return Ok(());
        }
        Err(Error::Invalid(
            "nothing to compact: the conversation has no exchange yet (or was saved by an \
             earlier release without its exchanges)"
                .into(),
        ))
    }

    /// Starts making `tab`'s conversation shorter for a next message of `next` tokens
    /// (`resume`, sent again after; `None`: `/compact`, which always compacts). False when no
    /// plan helps (the turn then goes as it would have, and is refused if it does not fit).
    pub(super) fn compact(
        &mut self,
        tab: TabId,
        next: usize,
        resume: Option<Resume>,
    ) -> Result<bool> {
        let tok = self.tok;
        let t = self.idle_tab(tab)?;
        let mode = match &resume {
            Some(r) if r.rounds > 0 => t.settings.overflow.mode,
            Some(_) => OverflowMode::Slide,
            None => OverflowMode::Compact,
        };
        let Some(held) = t.held.as_ref().filter(|h| !h.is_empty()) else {
            return Ok(false);
        };
        let sizes = Sizes {
            base: 1 + t.header.len(),
            ends: held.iter().map(|h| h.end).collect(),
            next,
            context: t.context,
            at: t.settings.overflow.at,
        };
        let before = t.convo.len();
        match mode {
            OverflowMode::Stop => Ok(false),
            OverflowMode::Slide => {
                let Some(dropped) = plan_slide(&sizes) else {
                    return Ok(false);
                };
                self.reshape(tab, Outcome::slide(dropped, before, resume))?;
                Ok(true)
            }
            OverflowMode::Compact => {
                // The request's own turn: its text and the turn markers around it.
                let ask = tok.encode(&t.settings.overflow.prompt)?.len() + 8;
                let context = t.context;
                match plan_compact(&sizes, ask) {
                    Some(plan) if plan.from == plan.keep_from => {
                        self.reshape(tab, Outcome::slide(plan.keep_from, before, resume))?;
                    }
                    Some(plan) => {
                        let covered = sizes.span(plan.from, plan.keep_from);
                        if resume.is_none() && covered < least_summary_tokens(context) {
                            return Err(Error::Invalid(format!(
                                "nothing worth compacting: the older exchanges take {covered} \
                                 tokens, and a summary would not be shorter"
                            )));
                        }
                        self.summarize(tab, plan, before, resume)?;
                    }
                    None => {
                        return self.no_room_for_a_summary(tab, &sizes, ask, before, resume);
                    }
                }
                Ok(true)
            }
        }
    }

    /// No room for a summary's turn (the request and the summary would not fit beside the
    /// conversation's opening and the message): `/compact` says why and changes nothing; a
    /// message that overflows slides the conversation instead, saying why. False when not even
    /// a slide makes room.
    fn no_room_for_a_summary(
        &mut self,
        tab: TabId,
        sizes: &Sizes,
        ask: usize,
        before: usize,
        resume: Option<Resume>,
    ) -> Result<bool> {
        let why = format!(
            "a summary does not fit the context of {} tokens (its request and the summary take \
             {}{})",
            sizes.context,
            ask + summary_tokens(sizes.context),
            match sizes.next {
                0 => String::new(),
                n => format!(", the new message {n}"),
            }
        );
        if resume.is_none() {
            return Err(Error::Invalid(format!(
                "{why}: the conversation is unchanged; set [sessions] context_overflow = \
                 \"slide\" or a larger context_length"
            )));
        }
        let Some(dropped) = plan_slide(sizes) else {
            return Ok(false);
        };
        self.emit(Event::Notice {
            tab,
            text: format!("{why}: the oldest exchanges are left out instead"),
        });
        self.reshape(tab, Outcome::slide(dropped, before, resume))?;
        Ok(true)
    }

    /// Starts the summary turn: the exchanges `plan` covers (resident when they begin the
    /// conversation, so only the request is prefilled), then the tab's request for a summary.
    /// Exchanges rendered again can take more tokens than they were sampled in: the oldest go
    /// until the turn fits, and when none does the conversation slides instead.
    fn summarize(
        &mut self,
        tab: TabId,
        mut plan: Plan,
        before: usize,
        resume: Option<Resume>,
    ) -> Result<()> {
        let (lm, marks, context) = (self.lm, self.towers.marks(), self.context);
        let hidden = lm.model.config().hidden_size;
        let declared = self.declared(tab);
        let decl = Self::declarations(&declared);
        let text = self.tool_text();
        let t = self.idle_tab(tab)?;
        let held = t.held.clone().unwrap_or_default();
        let covered: Vec<Exchange> = held[..plan.keep_from].iter().map(Held::exchange).collect();
        let setting = Setting::of(&t.settings, marks, t.context.min(context)).with_text(text);
        let base = 1 + t.header.len();
        let room = t.context.saturating_sub(least_summary_tokens(t.context));
        let (turn, rendered) = loop {
            let r = branch::rebase(
                lm,
                &t.convo,
                t.header.len(),
                t.held.as_deref(),
                &covered[plan.from..],
                &setting,
            )?;
            let turn = lm.user_turn(
                &r.ids,
                r.header,
                t.settings.system_prompt(),
                t.settings.thinking,
                &t.settings.overflow.prompt,
                &[],
                decl.as_ref(),
            )?;
            if turn.prompt.len() <= room {
                break (turn, r.images);
            }
            plan.from += 1;
            if plan.from == plan.keep_from {
                return self.reshape(tab, Outcome::slide(plan.keep_from, before, resume));
            }
        };
        // The pictures of the covered exchanges keep their place where the ids do; those
        // rendered again are encoded when the summary's prefill reaches them.
        let carried = crate::pictures::carry(
            &t.images,
            hidden,
            (&t.convo, base),
            (&turn.prompt, 1 + turn.header.len()),
        );
        let images = crate::pictures::merge(carried, rendered);
        let why = why_summarized(t, resume.is_some());
        if let Some(e) = turn.template_error {
            self.template_failed(tab, e);
        }
        self.emit(Event::Notice {
            tab,
            text: format!(
                "{why}: the model summarizes {}, then the conversation goes on from the summary",
                oldest(plan.keep_from - plan.from)
            ),
        });
        let pending = Pending {
            plan,
            before,
            resume,
        };
        self.start(
            tab,
            turn.prompt,
            turn.header,
            None,
            images,
            declared,
            Some(pending),
        )
    }

    /// The summary turn ended: the tab moves to the new path and the message goes again. A
    /// stopped summary leaves the conversation as it was; an empty one slides instead.
    pub(super) fn compacted(
        &mut self,
        tab: TabId,
        job: Job,
        end: TurnEnd,
        pending: Pending,
    ) -> Result<()> {
        let stats = job.turn.stats();
        if end == TurnEnd::Cancelled || !job.turn.prompt_done() {
            if pending.resume.is_none() {
                return Err(Error::Invalid(
                    "the compaction was stopped: the conversation is unchanged".into(),
                ));
            }
            self.emit(Event::Finished { tab, end, stats });
            return Ok(());
        }
        let (plan, before, resume) = (pending.plan, pending.before, pending.resume);
        let summary = job.answer_text.trim().to_string();
        if summary.is_empty() {
            if resume.is_none() {
                // On demand, nothing forces a shorter conversation: it stays whole.
                return Err(Error::Invalid(
                    "the model wrote an empty summary: the conversation is unchanged".into(),
                ));
            }
            self.emit(Event::Notice {
                tab,
                text: "the model wrote an empty summary: the oldest exchanges are dropped instead"
                    .into(),
            });
            return self.reshape(tab, Outcome::slide(plan.keep_from, before, resume));
        }
        let summary_ids = match self.channels {
            Some(ch) => crate::thinking::strip(job.turn.answer(), ch),
            None => job.turn.answer().to_vec(),
        };
        let outcome = Outcome {
            mode: OverflowMode::Compact,
            summary: Some(summary),
            summary_ids,
            summarized: plan.keep_from - plan.from,
            dropped: plan.from,
            before,
            resume,
            stats: Some(stats),
        };
        self.reshape(tab, outcome)
    }

    /// Moves the tab to its shorter path (the summary, if any, then the exchanges after the
    /// dropped and summarized ones), reports it and sends the waiting message again.
    fn reshape(&mut self, tab: TabId, o: Outcome) -> Result<()> {
        let (lm, marks, context) = (self.lm, self.towers.marks(), self.context);
        let text = self.tool_text();
        let t = self.idle_tab(tab)?;
        let held = t.held.clone().unwrap_or_default();
        // The summary answers a short question in the new path, not the request it was made for.
        let prompt = SUMMARY_LEAD.to_string();
        let from = o.dropped + o.summarized;
        let mut history: Vec<Exchange> = o
            .summary
            .iter()
            .map(|s| Exchange {
                user: prompt.clone(),
                answer: s.clone(),
                ..Exchange::default()
            })
            .collect();
        history.extend(held[from..].iter().map(Held::exchange));
        let setting = Setting::of(&t.settings, marks, t.context.min(context)).with_text(text);
        // The summary keeps the ids it was sampled in (its text may take more tokens
        // written again); the kept exchanges are rendered after it.
        let mut r = branch::Rendered::default();
        let first = usize::from(o.summary.is_some() && !o.summary_ids.is_empty());
        branch::render(lm, &mut r, &history[..first], &setting)?;
        if first == 1 {
            let base = 1 + r.header;
            r.ids.truncate(base + r.held[0].answer_start);
            r.ids.extend(&o.summary_ids);
            r.held[0].end = r.ids.len() - base;
        }
        branch::render(lm, &mut r, &history[first..], &setting)?;
        if o.mode == OverflowMode::Compact && r.ids.len() >= o.before {
            return self.not_shorter(tab, o, r.ids.len());
        }
        self.adopt(tab, r)?;
        let after = self.idle_tab(tab)?.convo.len();
        let report = Compaction {
            mode: o.mode,
            prompt,
            summary: o.summary,
            summarized: o.summarized,
            dropped: o.dropped,
            kept: held.len() - from,
            before: o.before,
            after,
            reused: o.stats.as_ref().map_or(0, |s| s.reused_tokens),
            prefilled: o.stats.as_ref().map_or(0, |s| s.prefilled_tokens),
            resumes: o.resume.is_some(),
        };
        self.emit(Event::Compacted { tab, report });
        match o.resume {
            // Its media as encoded the first time: the towers do not run again.
            Some(r) => self.submit_encoded(tab, &r.text, &r.attachments, r.rounds, r.encoded),
            None => Ok(()),
        }
    }

    /// A summary that would not make the conversation shorter is not used: `/compact` leaves
    /// the conversation as it was; a message that did not fit slides it instead.
    fn not_shorter(&mut self, tab: TabId, o: Outcome, after: usize) -> Result<()> {
        let why = format!(
            "the summary came out no shorter than what it would replace ({} → {after} tokens)",
            o.before
        );
        if o.resume.is_none() {
            return Err(Error::Invalid(format!(
                "{why}: the conversation is unchanged"
            )));
        }
        self.emit(Event::Notice {
            tab,
            text: format!("{why}: the oldest exchanges are left out instead"),
        });
        let from = o.dropped + o.summarized;
        self.reshape(tab, Outcome::slide(from, o.before, o.resume))
    }
}

/// Why a summary is made: an overflowing message (the context's figures), or `/compact`.
fn why_summarized(t: &crate::tabs::TabState, overflowing: bool) -> String {
    match overflowing {
        true => format!(
            "the conversation ({} of {} tokens) and the new message pass {}% of the context",
            t.convo.len(),
            t.context,
            (t.settings.overflow.at * 100.0).round()
        ),
        false => "/compact".to_string(),
    }
}

/// `n` oldest exchanges, in words.
fn oldest(n: usize) -> String {
    match n {
        1 => "the oldest exchange".to_string(),
        n => format!("the {n} oldest exchanges"),
    }
}
