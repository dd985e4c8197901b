//! How a turn starts on the engine thread: a message rendered after the tab's conversation
//! (compacted first when it would overflow), an answer asked for again, and the one place a
//! [`Turn`] and its [`Job`] are made from the tab's settings (sampling, thought budget, tools).

use super::Worker;
use super::encoding::Encoding;
use super::pictures::place;
use crate::branch::Held;
use crate::budget::ThoughtLimit;
use crate::compact::summary_tokens;
use crate::error::{Error, Result};
use crate::images::MediaSpan;
use crate::job::{CHUNK, Job, JobKind, Pending, Resume};
use crate::pictures::Encoded;
use crate::pictures::media;
use crate::protocol::{Attachment, Event, TabId};
use crate::reply::Reply;
use crate::turn::{Turn, TurnOptions};
use gemma_model::tokenizer::template::TemplateError;
use gemma_tools::host::ToolSpec;

impl Worker<'_> {
    /// Answers `text` in `tab`, its pictures and recordings encoded first. With `rounds` left, a prompt past the tab's overflow share
    /// compacts (or slides) the conversation first and is sent again after with one round
    /// less; in the last round, only a prompt that does not fit at all slides (a summary can
    /// come out longer in tokens than it was sampled).
    pub(super) fn submit(
        &mut self,
        tab: TabId,
        text: &str,
        attachments: &[Attachment],
        rounds: u8,
    ) -> Result<()> {
        self.media_fits(tab, attachments)?;
        if !attachments.is_empty() {
            // Encoded a unit a step (`worker/encoding.rs`), then the turn starts.
            let t = self.idle_tab(tab)?;
            t.encoding = Some(Encoding::new(text, attachments, rounds));
            return Ok(());
        }
        self.submit_encoded(tab, text, attachments, rounds, Vec::new())
    }

    /// [`Self::submit`] once the message's pictures and recordings are `encoded`.
    pub(super) fn submit_encoded(
        &mut self,
        tab: TabId,
        text: &str,
        attachments: &[Attachment],
        rounds: u8,
        encoded: Vec<Encoded>,
    ) -> Result<()> {
        let lm = self.lm;
        let marks = self.towers.marks();
        let hidden = lm.model.config().hidden_size;
        let declared = self.declared(tab);
        let decl = Self::declarations(&declared);
        let t = self.idle_tab(tab)?;
        // A changed header rewinds the session to it, and the turn says so.
        let turn = lm.user_turn(
            &t.convo,
            t.header.len(),
            t.settings.system_prompt(),
            t.settings.thinking,
            text,
            &media(&encoded),
            decl.as_ref(),
        )?;
        let (prompt, images) = place(t, &turn, &marks, hidden, &encoded)?;
        let next = prompt.len().saturating_sub(t.convo.len());
        if rounds > 0 && self.overflowing(tab, prompt.len(), rounds) {
            let resume = Resume {
                text: text.to_string(),
                attachments: attachments.to_vec(),
                encoded: encoded.clone(),
                rounds: rounds - 1,
            };
            if self.compact(tab, next, Some(resume))? {
                return Ok(());
            }
        }
        let t = self.idle_tab(tab)?;
        let sent = crate::protocol::Exchange {
            user: text.to_string(),
            media: attachments.to_vec(),
            ..crate::protocol::Exchange::default()
        };
        let exchange = t.held.clone().map(|h| (h, sent));
        if let Some(e) = turn.template_error {
            self.template_failed(tab, e);
        }
        if let Some(text) = turn.template_slow {
            self.emit(Event::Notice { tab, text });
        }
        self.start(tab, prompt, turn.header, exchange, images, declared, None)?;
        self.keep_all(tab, &encoded);
        Ok(())
    }

    /// The checkpoint's template failed and the built-in layout stood in: said once, in full.
    pub(super) fn template_failed(&mut self, tab: TabId, e: TemplateError) {
        if !self.template_warned {
            self.template_warned = true;
            self.emit(Event::TemplateFallback {
                tab,
                error: e.to_string(),
            });
        }
    }

    pub(super) fn regenerate(&mut self, tab: TabId) -> Result<()> {
        let t = self.idle_tab(tab)?;
        let at = t
            .last_answer
            .ok_or_else(|| Error::Invalid("there is no answer to regenerate yet".into()))?;
        let prompt = t.convo[..at].to_vec();
        let header = t.header.clone();
        let images = t.images.clone();
        // The last exchange is answered again (its calls were the old answer's).
        let exchange = t.held.clone().and_then(|mut h| {
            let last = h.pop()?;
            let sent = crate::protocol::Exchange {
                calls: Vec::new(),
                ..last.exchange()
            };
            Some((h, sent))
        });
        let declared = self.declared(tab);
        self.start(tab, prompt, header, exchange, images, declared, None)
    }

    /// Answers on from the end of the tab's conversation (`Command::Continue`): after the last
    /// exchange's tool responses, which the front end sent with the path. The header is
    /// rendered again with the tab's tools (a path rebuilt from a transcript has none in it);
    /// the answer, its text and its calls join the last exchange's.
    pub(super) fn continue_answer(&mut self, tab: TabId) -> Result<()> {
        let (lm, hidden) = (self.lm, self.lm.model.config().hidden_size);
        let declared = self.declared(tab);
        let decl = Self::declarations(&declared);
        let t = self.idle_tab(tab)?;
        let (Some(at), Some(mut held)) = (t.last_answer, t.held.clone()) else {
            return Err(Error::Invalid("there is no answer to go on with".into()));
        };
        let last = held
            .pop()
            .ok_or_else(|| Error::Invalid("there is no answer to go on with".into()))?;
        let turn = lm.user_turn(
            &t.convo,
            t.header.len(),
            t.settings.system_prompt(),
            t.settings.thinking,
            "",
            &[],
            decl.as_ref(),
        )?;
        let (old, new) = (1 + t.header.len(), 1 + turn.header.len());
        let mut prompt = t.convo[..1].to_vec();
        prompt.extend(&turn.header);
        prompt.extend(&t.convo[old..]);
        let images = crate::pictures::carry(&t.images, hidden, (&t.convo, old), (&prompt, new));
        let answer = last.exchange();
        let handovers = answer.calls.last().map_or(0, |c| c.handover + 1);
        let text = answer.answer.clone();
        let sent = Some((held, answer));
        self.start(tab, prompt, turn.header, sent, images, declared, None)?;
        if let Some(job) = self.tabs.get_mut(tab).and_then(|t| t.job.as_mut()) {
            job.continues = Some(at - old + new);
            job.answer_text = text;
            if let Some(jt) = job.tools.as_mut() {
                jt.handovers = handovers;
            }
        }
        Ok(())
    }

    /// Starts a turn whose whole conversation is `prompt`; `exchange` is what the tab's
    /// exchanges become before it (with its user text), when known. With `compaction`, the
    /// turn writes a summary: short, without tools, its text kept rather than shown.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        tab: TabId,
        prompt: Vec<u32>,
        header: Vec<u32>,
        exchange: Option<(Vec<Held>, crate::protocol::Exchange)>,
        images: Vec<MediaSpan>,
        declared: Vec<ToolSpec>,
        compaction: Option<Pending>,
    ) -> Result<()> {
        let inject = self
            .options
            .inject_failure
            .take_if(|(t, _)| *t == tab)
            .map(|(_, n)| n);
        let channels = self.channels;
        let opts = self.turn_options(tab, prompt.len(), compaction.is_some());
        let summary = compaction.is_some();
        let t = self.tab(tab);
        let turn = Turn::start_with(&mut t.session, prompt, images.clone(), opts)?;
        if let Some(n) = inject {
            t.session.fail_after(n);
        }
        let stops = if summary {
            Vec::new()
        } else {
            t.settings.stop.clone()
        };
        let mut turn = turn;
        self.fill_rows(tab, &mut turn)?;
        // What the conversation holds after the turn: the rows just filled in included.
        let images = turn.images_from().1.to_vec();
        let (turn, tools) = self.guided(tab, turn, declared, summary)?;
        let t = self.tab(tab);
        t.job = Some(Job {
            turn,
            reply: Reply::new(channels, stops),
            header,
            kind: compaction.map_or(JobKind::Answer, JobKind::Summary),
            exchange,
            answer_text: String::new(),
            images,
            tools,
            text_start: 0,
            continues: None,
        });
        self.enforce_budget(tab);
        Ok(())
    }

    /// The options of a turn of `tab` answering a prompt of `prompt` tokens (`summary`: a
    /// compaction's summary: short, its text kept rather than shown).
    fn turn_options(&mut self, tab: TabId, prompt: usize, summary: bool) -> TurnOptions {
        let end_ids = self.end_ids.clone();
        let (thoughts, forced) = (self.thoughts.clone(), self.options.forced.clone());
        let now = self.tabs.touch(tab);
        let t = self.tab(tab);
        // A new seed per turn (from the tab's), so that a regenerate can answer differently.
        let mut sampling = t.settings.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(now);
        // Thinking off allows no thought: one opened anyway is closed at once. A summary may
        // think for half of its tokens at most.
        let half = summary_tokens(t.context) / 2;
        let thinking = thoughts.map(|vocab| ThoughtLimit {
            budget: match (t.settings.thinking, summary) {
                (false, _) => Some(0),
                (true, false) => t.settings.thought_budget,
                (true, true) => Some(t.settings.thought_budget.map_or(half, |b| b.min(half))),
            },
            vocab,
        });
        TurnOptions {
            sampling,
            // A summary gets what its turn leaves, up to its share.
            max_new_tokens: match summary {
                true => summary_tokens(t.context).min(t.context.saturating_sub(prompt + 1)),
                false => t.settings.max_new_tokens,
            },
            end_ids,
            context: t.context,
            chunk: CHUNK,
            boundary_snapshot: true,
            prompt_logits: false,
            thinking,
            forced,
            // A summary's text is kept, not shown: speculation is for answers.
            speculation: match summary {
                true => Default::default(),
                false => t.settings.speculation,
            },
        }
    }
}
