//! The engine thread's loop ([`Worker`]): owns the one copy of the weights and every tab
//! ([`Tabs`]), serves [`Command`]s and streams [`Event`]s. Work advances one prefill chunk or one
//! decode step at a time, round-robin over the tabs that have a turn running, and commands are
//! read between steps: a cancel lands within one chunk or step, and a long prefill in one tab
//! never freezes another. One place assembles a conversation turn: [`LoadedModel::prompt_ids`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::Duration;

use super::branch::Held;
use super::budget::{ThoughtLimit, ThoughtVocab};
use super::convo_store::ConvoStore;
use super::images::Image;
use super::job::{CHUNK, Ctx, Job, Pending, Resume};
use super::kv_store::KvStore;
use super::options::EngineOptions;
use super::protocol::{Attachment, Command, Event, Interrupts, TabId, TurnEnd};
use super::reply::Reply;
use super::tabs::{Stores, TabState, Tabs};
use super::thinking::{self, Channels, ThinkingPolicy};
use super::tools::EngineTools;
use super::turn::{Turn, TurnOptions};
use gemma_model::checkpoint::LoadedModel;
use gemma_model::error::{Error, Result};
use gemma_model::tokenizer::Tokenizer;
use gemma_model::tokenizer::template::TemplateError;
use gemma_model::tokenizer::template::sandbox::Interrupt;
use gemma_model::vision::VisionTower;
use gemma_tools::host::ToolSpec;

mod compact;
mod paths;
mod pictures;
mod tool_calls;

use self::pictures::place;
pub(crate) use self::tool_calls::catalogue_of;

/// How often a turn that waits for its tools looks for their results.
const TOOL_POLL: Duration = Duration::from_millis(15);

pub(super) struct Worker<'a> {
    lm: &'a LoadedModel,
    tok: &'a Tokenizer,
    events: Sender<Event>,
    tabs: Tabs,
    /// Ids that end a model turn.
    end_ids: Vec<u32>,
    /// Channel markers when the model thinks.
    channels: Option<Channels>,
    /// What the thought budget needs of the vocabulary, when the model thinks.
    thoughts: Option<Arc<ThoughtVocab>>,
    /// The tab served last (round-robin).
    last: Option<TabId>,
    options: EngineOptions,
    /// Warm-restart snapshots.
    kv: Option<KvStore>,
    /// The attached chats' conversations.
    convos: Option<ConvoStore>,
    /// Context limit per tab, in tokens.
    context: usize,
    /// The checkpoint's chat template failed and the user was told.
    template_warned: bool,
    /// The tab whose turn the chat template renders now (for its interrupt).
    rendering: Arc<AtomicU64>,
    /// The vision tower, or why the model has none.
    tower: std::result::Result<&'a VisionTower, String>,
    /// The tools the model may call, when the front end started a host.
    tools: Option<EngineTools>,
}

impl<'a> Worker<'a> {
    pub fn new(
        lm: &'a LoadedModel,
        tok: &'a Tokenizer,
        events: Sender<Event>,
        options: EngineOptions,
        context: usize,
        stores: Stores,
        channels: Option<Channels>,
    ) -> Self {
        Self {
            lm,
            tok,
            events,
            tabs: Tabs::default(),
            end_ids: lm.chat_end_ids(),
            channels,
            thoughts: channels.map(|ch| {
                let message = options.thinking_message.as_deref();
                Arc::new(ThoughtVocab::new(tok, ch, message))
            }),
            last: None,
            options,
            kv: stores.kv,
            convos: stores.convos,
            context,
            template_warned: false,
            rendering: Arc::default(),
            tower: Err("this model reads text only".into()),
            tools: None,
        }
    }

    /// The tools the model may call (`None`: none).
    pub fn with_tools(mut self, tools: Option<EngineTools>) -> Self {
        self.tools = tools;
        self
    }

    /// The model's vision tower, or why it has none (told when a picture comes).
    pub fn with_tower(mut self, tower: std::result::Result<&'a VisionTower, String>) -> Self {
        self.tower = tower;
        self
    }

    /// Serves `commands` until shutdown; a render of the chat template for a tab whose stop is
    /// raised in `interrupts` is cut short.
    pub fn run(mut self, commands: Receiver<Command>, interrupts: &Arc<Interrupts>) {
        let (watch, rendering) = (interrupts.clone(), self.rendering.clone());
        self.lm.chat.set_interrupt(Some(Interrupt(Arc::new(move || {
            watch.raised(rendering.load(Ordering::SeqCst))
        }))));
        self.report_tools();
        loop {
            let busy = self.tabs.busy();
            let first = if busy && self.all_waiting() {
                // Only tools are working: wait for them, or for a command, without spinning.
                match commands.recv_timeout(TOOL_POLL) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else if busy {
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
                let stop = matches!(c, Command::Cancel { .. } | Command::CloseTab { .. })
                    .then(|| c.clone());
                self.command(c);
                if let Some(stop) = stop {
                    interrupts.lower(&stop);
                }
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

    /// Serves one command; what fails is told to its tab.
    fn command(&mut self, c: Command) {
        let Some(tab) = c.tab() else { return };
        // Whatever this command renders with the chat template, it renders for `tab`.
        self.rendering.store(tab, Ordering::SeqCst);
        if let Err(e) = self.apply(c) {
            self.emit(Event::Failed {
                tab,
                error: e.to_string(),
            });
        }
    }

    fn apply(&mut self, c: Command) -> Result<()> {
        match c {
            Command::Submit { tab, text, images } => self.submit(tab, &text, &images, 2)?,
            Command::SetOverflow { tab, overflow } => self.tab(tab).overflow = overflow,
            Command::Compact { tab } => self.compact_now(tab)?,
            Command::Regenerate { tab } => self.regenerate(tab)?,
            Command::Cancel { tab } => {
                self.stop_tools(tab);
                if let Some(job) = self.tabs.get_mut(tab).and_then(|t| t.job.as_mut()) {
                    job.turn.cancel();
                }
            }
            Command::SetTools {
                tab,
                selection,
                choice,
            } => {
                let t = self.tab(tab);
                t.tools.selection = selection;
                t.tools.choice = choice;
                if self.tools.is_none() && choice == crate::protocol::ToolChoice::Required {
                    return Err(Error::Invalid(
                        "tool_choice = \"required\", but no tools are configured ([mcp.servers] \
                         or [tools] in the config)"
                            .into(),
                    ));
                }
            }
            Command::DecideTool {
                tab,
                call,
                decision,
            } => self.decide(tab, call, decision)?,
            Command::CloseTab { tab } => {
                let chat = self.tabs.get_mut(tab).and_then(|t| t.chat.take());
                if let (Some(store), Some(chat)) = (&self.convos, chat) {
                    store.remove(&chat);
                }
                self.tabs.remove(tab);
            }
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
            Command::SetThinking { tab, on, budget } => {
                let t = self.tab(tab);
                t.thinking = on;
                t.thought_budget = budget;
                if on && !self.lm.supports_thinking() {
                    return Err(Error::Invalid(
                        "this model has no thinking mode; the setting has no effect".into(),
                    ));
                }
            }
            Command::SetSystem { tab, text } => {
                self.tab(tab).system = text.filter(|s| !s.trim().is_empty());
            }
            Command::Attach {
                tab,
                chat,
                history,
                legacy,
            } => self.attach(tab, chat, history, legacy)?,
            Command::SetPath { tab, history } => self.set_path(tab, &history)?,
            Command::Fork { tab, from, history } => {
                self.fork(tab, from)?;
                self.set_path(tab, &history)?;
            }
            Command::SetContext { tab, tokens } => {
                let max = self.lm.model.config().max_position_embeddings;
                if tokens == 0 || tokens > max {
                    return Err(Error::Invalid(format!(
                        "model.context_length = {tokens} does not fit this model: allowed 1 to \
                         {max}"
                    )));
                }
                self.tab(tab).context = tokens;
            }
            Command::Shutdown => {}
        }
        Ok(())
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

    /// Answers `text` in `tab`. With `rounds` left, a prompt past the tab's overflow share
    /// compacts (or slides) the conversation first and is sent again after with one round
    /// less; in the last round, only a prompt that does not fit at all slides (a summary can
    /// come out longer in tokens than it was sampled).
    fn submit(
        &mut self,
        tab: TabId,
        text: &str,
        attachments: &[Attachment],
        rounds: u8,
    ) -> Result<()> {
        let lm = self.lm;
        self.idle_tab(tab)?;
        let encoded = self.encode(tab, attachments)?;
        let spec = self.tower.as_ref().ok().map(|t| t.spec());
        let hidden = lm.model.config().hidden_size;
        let declared = self.declared(tab);
        let decl = Self::declarations(&declared);
        let t = self.idle_tab(tab)?;
        // A changed header rewinds the session to it, and the turn says so.
        let turn = lm.user_turn(
            &t.convo,
            t.header.len(),
            t.system.as_deref(),
            t.thinking,
            text,
            encoded.len(),
            decl.as_ref(),
        )?;
        let (prompt, images) = place(t, &turn, spec, hidden, &encoded)?;
        let next = prompt.len().saturating_sub(t.convo.len());
        if rounds > 0 && self.overflowing(tab, prompt.len(), rounds) {
            let resume = Resume {
                text: text.to_string(),
                attachments: attachments.to_vec(),
                rounds: rounds - 1,
            };
            if self.compact(tab, next, Some(resume))? {
                return Ok(());
            }
        }
        let t = self.idle_tab(tab)?;
        let exchange = t.held.clone().map(|h| (h, text.to_string()));
        if let Some(e) = turn.template_error {
            self.template_failed(tab, e);
        }
        if let Some(text) = turn.template_slow {
            self.emit(Event::Notice { tab, text });
        }
        self.start(tab, prompt, turn.header, exchange, images, declared, None)
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
        let images = t.images.clone();
        // The last exchange is answered again.
        let exchange = t.held.clone().and_then(|mut h| {
            let last = h.pop()?;
            Some((h, last.user))
        });
        let declared = self.declared(tab);
        self.start(tab, prompt, header, exchange, images, declared, None)
    }

    /// Starts a turn whose whole conversation is `prompt`; `exchange` is what the tab's
    /// exchanges become before it (with its user text), when known. With `compaction`, the
    /// turn writes a summary: short, without tools, its text kept rather than shown.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        tab: TabId,
        prompt: Vec<u32>,
        header: Vec<u32>,
        exchange: Option<(Vec<Held>, String)>,
        images: Vec<Image>,
        declared: Vec<ToolSpec>,
        compaction: Option<Pending>,
    ) -> Result<()> {
        let inject = self
            .options
            .inject_failure
            .take_if(|(t, _)| *t == tab)
            .map(|(_, n)| n);
        let (channels, end_ids) = (self.channels, self.end_ids.clone());
        let (thoughts, forced) = (self.thoughts.clone(), self.options.forced.clone());
        let now = self.tabs.touch(tab);
        let t = self.tab(tab);
        // A new seed per turn (from the tab's), so that a regenerate can answer differently.
        let mut sampling = t.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(now);
        let summary = compaction.is_some();
        // Thinking off allows no thought: one opened anyway is closed at once. A summary may
        // think for half of its tokens at most.
        let half = super::compact::summary_tokens(t.context) / 2;
        let thinking = thoughts.map(|vocab| ThoughtLimit {
            budget: match (t.thinking, summary) {
                (false, _) => Some(0),
                (true, false) => t.thought_budget,
                (true, true) => Some(t.thought_budget.map_or(half, |b| b.min(half))),
            },
            vocab,
        });
        let opts = TurnOptions {
            sampling,
            // A summary gets what its turn leaves, up to its share.
            max_new_tokens: match summary {
                true => super::compact::summary_tokens(t.context)
                    .min(t.context.saturating_sub(prompt.len() + 1)),
                false => t.max_new_tokens,
            },
            end_ids,
            context: t.context,
            chunk: CHUNK,
            boundary_snapshot: true,
            prompt_logits: false,
            thinking,
            forced,
        };
        let turn = Turn::start_with(&mut t.session, prompt, images.clone(), opts)?;
        if let Some(n) = inject {
            t.session.fail_after(n);
        }
        let stops = if summary {
            Vec::new()
        } else {
            t.stop_strings.clone()
        };
        let (turn, tools) = self.guided(tab, turn, declared, summary)?;
        let t = self.tab(tab);
        t.job = Some(Job {
            turn,
            reply: Reply::new(channels, stops),
            header,
            quiet: false,
            exchange,
            answer_text: String::new(),
            images,
            tools,
            text_start: 0,
            compaction,
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
        if job.turn.paused() && !job.quiet {
            self.tools_step(tab);
            return;
        }
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
        if let Some(pending) = job.compaction.take() {
            return self.compacted(tab, job, end, pending);
        }
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
            t.header = std::mem::take(&mut job.header);
            let base = 1 + t.header.len();
            t.held = job.exchange.take().map(|(mut held, user)| {
                held.push(Held {
                    user,
                    answer: std::mem::take(&mut job.answer_text),
                    answer_start: at - base,
                    end: convo.len() - base,
                });
                held
            });
            t.convo = convo;
            t.images = std::mem::take(&mut job.images);
            t.last_answer = Some(at);
        }
        if let Some(ids) = settle {
            let opts = TurnOptions {
                chunk: CHUNK,
                boundary_snapshot: true,
                ..TurnOptions::greedy(0, usize::MAX)
            };
            t.job = Some(Job {
                turn: Turn::start_with(&mut t.session, ids, t.images.clone(), opts)?,
                reply: Reply::new(None, Vec::new()),
                header: t.header.clone(),
                quiet: true,
                exchange: None,
                answer_text: String::new(),
                images: t.images.clone(),
                tools: None,
                text_start: 0,
                compaction: None,
            });
        }
        // The conversation as it now stands (unchanged when the prompt was not all prefilled):
        // the UI's context meter.
        let tokens = t.convo.len();
        if job.turn.prompt_done() {
            self.save_convo(tab);
        }
        self.emit(Event::Committed { tab, tokens });
        self.emit(Event::Finished { tab, end, stats });
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
