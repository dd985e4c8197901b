//! The engine thread's loop ([`Worker`]): owns the one copy of the weights and every tab
//! ([`Tabs`]), serves [`Command`]s and streams [`Event`]s. Work advances one prefill chunk or one
//! decode step at a time, round-robin over the tabs that have a turn running, and commands are
//! read between steps: a cancel lands within one chunk or step, and a long prefill in one tab
//! never freezes another. One place assembles a conversation turn: [`LoadedModel::prompt_ids`].

use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use super::handle::EngineOptions;
use super::job::{CHUNK, Ctx, Job};
use super::kv_store::KvStore;
use super::protocol::{Command, Event, TabId, TurnEnd};
use super::reply::Reply;
use super::tabs::{TabState, Tabs};
use super::thinking::{self, Channels, ThinkingPolicy};
use super::turn::{Turn, TurnOptions};
use crate::error::{Error, Result};
use crate::load::LoadedModel;
use crate::tokenizer::Tokenizer;
use crate::tokenizer::template::TemplateError;

pub(super) struct Worker<'a> {
    lm: &'a LoadedModel,
    tok: &'a Tokenizer,
    events: Sender<Event>,
    tabs: Tabs,
    /// Ids that end a model turn.
    end_ids: Vec<u32>,
    /// Channel markers when the model thinks.
    channels: Option<Channels>,
    /// The tab served last (round-robin).
    last: Option<TabId>,
    options: EngineOptions,
    /// Warm-restart snapshots.
    kv: Option<KvStore>,
    /// Context limit per tab, in tokens.
    context: usize,
    /// The checkpoint's chat template failed and the user was told.
    template_warned: bool,
}

impl<'a> Worker<'a> {
    pub fn new(
        lm: &'a LoadedModel,
        tok: &'a Tokenizer,
        events: Sender<Event>,
        options: EngineOptions,
        context: usize,
        kv: Option<KvStore>,
        channels: Option<Channels>,
    ) -> Self {
        Self {
            lm,
            tok,
            events,
            tabs: Tabs::default(),
            end_ids: lm.chat_end_ids(),
            channels,
            last: None,
            options,
            kv,
            context,
            template_warned: false,
        }
    }

    pub fn run(mut self, commands: Receiver<Command>) {
        loop {
            let busy = self.tabs.busy();
            let first = if busy {
                match commands.try_recv() {
                    Ok(c) => Some(c),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => return,
                }
            } else {
                match commands.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            };
            let mut next = first;
            while let Some(c) = next {
                if c == Command::Shutdown {
                    if let Some(kv) = &self.kv {
                        self.tabs.persist(kv);
                    }
                    return;
                }
                self.command(c);
                next = commands.try_recv().ok();
            }
            self.step();
        }
    }

    fn emit(&self, e: Event) {
        let _ = self.events.send(e);
    }

    fn tab(&mut self, tab: TabId) -> &mut TabState {
        self.tabs.get_or_insert(tab, &self.lm.model, self.context)
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit { tab, text } => {
                if let Err(e) = self.submit(tab, &text) {
                    self.emit(Event::Failed {
                        tab,
                        error: e.to_string(),
                    });
                }
            }
            Command::Regenerate { tab } => {
                if let Err(e) = self.regenerate(tab) {
                    self.emit(Event::Failed {
                        tab,
                        error: e.to_string(),
                    });
                }
            }
            Command::Cancel { tab } => {
                if let Some(job) = self.tabs.get_mut(tab).and_then(|t| t.job.as_mut()) {
                    job.turn.cancel();
                }
            }
            Command::CloseTab { tab } => self.tabs.remove(tab),
            Command::SetSampling {
                tab,
                sampling,
                max_new_tokens,
                stop,
            } => {
                let t = self.tab(tab);
                t.sampling = sampling;
                t.max_new_tokens = max_new_tokens;
                t.stop_strings = stop;
            }
            Command::SetThinking { tab, on } => {
                if on && !self.lm.supports_thinking() {
                    self.emit(Event::Failed {
                        tab,
                        error: "this model has no thinking mode; the setting has no effect".into(),
                    });
                }
                self.tab(tab).thinking = on;
            }
            Command::SetSystem { tab, text } => {
                self.tab(tab).system = text.filter(|s| !s.trim().is_empty());
            }
            Command::Restore {
                tab,
                ids,
                header,
                last_answer,
            } => self.restore(tab, ids, header, last_answer),
            Command::SetContext { tab, tokens } => {
                let max = self.lm.model.config().max_position_embeddings;
                if tokens == 0 || tokens > max {
                    self.emit(Event::Failed {
                        tab,
                        error: format!(
                            "model.context_length = {tokens} does not fit this model: allowed 1 \
                             to {max}"
                        ),
                    });
                } else {
                    self.tab(tab).context = tokens;
                }
            }
            Command::Shutdown => {}
        }
    }

    /// The tab's job, unless a turn is running: a quiet re-prefill gives way to a new turn.
    fn idle_tab(&mut self, tab: TabId) -> Result<&mut TabState> {
        let t = self.tab(tab);
        if t.job.as_ref().is_some_and(|j| j.quiet) {
            t.job = None;
        }
        if t.job.is_some() {
            return Err(Error::Invalid(
                "a turn is still running in this tab; stop it first".into(),
            ));
        }
        Ok(t)
    }

    /// Brings back a saved conversation. Chats saved by earlier releases closed the last answer with its
    /// stop id and ended the header before the first user turn's opening: both are brought to
    /// today's form (and the UI told), and a snapshot saved under the old ids still loads.
    fn restore(&mut self, tab: TabId, ids: Vec<u32>, header: usize, last: Option<usize>) {
        let cfg = self.lm.model.config();
        let valid = ids.first() == Some(&cfg.bos_token_id)
            && header < ids.len()
            && last.is_none_or(|a| a <= ids.len())
            && ids.iter().all(|&i| (i as usize) < cfg.vocab_size);
        let normal = valid.then(|| self.normalize(&ids, header)).flatten();
        let Some((convo, settled)) = normal else {
            self.emit(Event::Failed {
                tab,
                error: "the saved conversation does not fit this model; the tab starts a new \
                        conversation"
                    .into(),
            });
            return;
        };
        let model = &self.lm.model;
        let kv = self.kv.clone();
        let t = self.tab(tab);
        let changed = convo != ids || settled != header;
        t.convo = convo;
        t.header = t.convo[1..1 + settled].to_vec();
        t.last_answer = last;
        // With a snapshot that verifies, the tab is warm (in host memory) at once.
        let warm = kv.is_some_and(|kv| {
            kv.load(&ids, model, &mut t.session) || kv.load(&t.convo, model, &mut t.session)
        });
        if !warm {
            t.session.mark_restored();
        }
        if changed {
            let e = Event::Committed {
                tab,
                ids: t.convo.clone(),
                header: settled,
                last_answer: last,
            };
            self.emit(e);
        }
        self.report_tiers();
    }

    /// A saved conversation in today's form (see [`Self::restore`]), or `None` when its header
    /// is not followed by the first user turn.
    fn normalize(&self, ids: &[u32], header: usize) -> Option<(Vec<u32>, usize)> {
        let mut convo = ids.to_vec();
        if convo.len() > 1 + header && convo.last().is_some_and(|i| self.end_ids.contains(i)) {
            convo.pop();
        }
        let opening = self.lm.user_turn(&[], 0, None, false, "").ok()?.header;
        let after = convo.get(1 + header..)?;
        let header = if !opening.is_empty() && after.starts_with(&opening) {
            header + opening.len()
        } else {
            header
        };
        (header < convo.len()).then_some((convo, header))
    }

    fn submit(&mut self, tab: TabId, text: &str) -> Result<()> {
        let lm = self.lm;
        let t = self.idle_tab(tab)?;
        // A changed header rewinds the session to it, and the turn says so.
        let turn = lm.user_turn(
            &t.convo,
            t.header.len(),
            t.system.as_deref(),
            t.thinking,
            text,
        )?;
        if let Some(e) = turn.template_error {
            self.template_failed(tab, e);
        }
        self.start(tab, turn.prompt, turn.header)
    }

    /// The checkpoint's template failed and the built-in layout stood in: said once, in full.
    fn template_failed(&mut self, tab: TabId, e: TemplateError) {
        if !self.template_warned {
            self.template_warned = true;
            self.emit(Event::TemplateFallback {
                tab,
                error: e.to_string(),
            });
        }
    }

    fn regenerate(&mut self, tab: TabId) -> Result<()> {
        let t = self.idle_tab(tab)?;
        let at = t
            .last_answer
            .ok_or_else(|| Error::Invalid("there is no answer to regenerate yet".into()))?;
        let prompt = t.convo[..at].to_vec();
        let header = t.header.clone();
        self.start(tab, prompt, header)
    }

    /// Starts a turn whose whole conversation is `prompt`.
    fn start(&mut self, tab: TabId, prompt: Vec<u32>, header: Vec<u32>) -> Result<()> {
        let inject = self
            .options
            .inject_failure
            .take_if(|(t, _)| *t == tab)
            .map(|(_, n)| n);
        let (channels, end_ids) = (self.channels, self.end_ids.clone());
        let now = self.tabs.touch(tab);
        let t = self.tab(tab);
        // A new seed per turn (from the tab's), so that a regenerate can answer differently.
        let mut sampling = t.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(now);
        let opts = TurnOptions {
            sampling,
            max_new_tokens: t.max_new_tokens,
            end_ids,
            context: t.context,
            chunk: CHUNK,
            boundary_snapshot: true,
            prompt_logits: false,
        };
        let turn = Turn::start(&mut t.session, prompt, opts)?;
        if let Some(n) = inject {
            t.session.fail_after(n);
        }
        t.job = Some(Job {
            turn,
            reply: Reply::new(channels, t.stop_strings.clone()),
            header,
            quiet: false,
        });
        self.enforce_budget(tab);
        Ok(())
    }

    /// Advances the next running turn, round-robin, by one prefill chunk or one decode step.
    fn step(&mut self) {
        let Some(tab) = self.tabs.next_busy(self.last) else {
            return;
        };
        self.last = Some(tab);
        let cx = Ctx {
            tab,
            model: &self.lm.model,
            tok: self.tok,
            events: &self.events,
        };
        let Some(t) = self.tabs.get_mut(tab) else {
            return;
        };
        let Some(job) = t.job.as_mut() else { return };
        let result = job.advance(&cx, &mut t.session);
        let quiet = job.quiet;
        let failed = match result {
            Ok(None) => None,
            Ok(Some(end)) => {
                let job = t.job.take().expect("the job just advanced");
                if quiet {
                    None
                } else {
                    self.finish(tab, job, end).err()
                }
            }
            Err(e) => {
                t.job = None;
                // A failed quiet re-prefill has left the session dirty; the next turn says so.
                (!quiet).then_some(e)
            }
        };
        if let Some(e) = failed {
            self.emit(Event::Failed {
                tab,
                error: e.to_string(),
            });
        }
    }

    /// Ends a turn: commits it to the tab's conversation when its prompt was prefilled (the
    /// next turn's template text closes it), and tells the UI. Under the `strip` thinking
    /// policy the history holds the answer without its thought, as the template renders it,
    /// and the session is re-prefilled to match by a quiet job.
    fn finish(&mut self, tab: TabId, mut job: Job, end: TurnEnd) -> Result<()> {
        let strip = self.options.thinking_policy == ThinkingPolicy::Strip;
        let channels = self.channels.filter(|_| strip && job.reply.thought_seen());
        let Some(t) = self.tabs.get_mut(tab) else {
            return Ok(());
        };
        let stats = job.turn.stats();
        let mut settle = None;
        if job.turn.prompt_done() {
            let at = job.turn.prompt().len();
            let mut convo = job.turn.prompt().to_vec();
            match channels {
                Some(ch) => {
                    convo.extend(thinking::strip(job.turn.answer(), ch));
                    settle = Some(convo.clone());
                }
                None => convo.extend(job.turn.answer()),
            }
            t.convo = convo;
            t.header = std::mem::take(&mut job.header);
            t.last_answer = Some(at);
            let _ = self.events.send(Event::Committed {
                tab,
                ids: t.convo.clone(),
                header: t.header.len(),
                last_answer: t.last_answer,
            });
        }
        let _ = self.events.send(Event::Finished { tab, end, stats });
        if let Some(ids) = settle {
            let opts = TurnOptions {
                chunk: CHUNK,
                boundary_snapshot: true,
                ..TurnOptions::greedy(0, usize::MAX)
            };
            t.job = Some(Job {
                turn: Turn::start(&mut t.session, ids, opts)?,
                reply: Reply::new(None, Vec::new()),
                header: t.header.clone(),
                quiet: true,
            });
        }
        self.enforce_budget(tab);
        Ok(())
    }

    /// Keeps the device budget (see [`Tabs::enforce_budget`]) and reports tier changes.
    fn enforce_budget(&mut self, active: TabId) {
        let (device, host) = (self.options.memory_budget, self.options.host_budget);
        self.tabs.enforce_budget(active, device, host);
        self.report_tiers();
    }

    /// Tells the UI about every tab whose tier changed.
    fn report_tiers(&mut self) {
        for (tab, tier) in self.tabs.changed_tiers() {
            self.emit(Event::TabState { tab, tier });
        }
    }
}
