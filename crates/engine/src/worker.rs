//! The engine thread's loop ([`Worker`]): owns the one copy of the weights and every tab
//! ([`Tabs`]), serves [`Command`]s and streams [`Event`]s. Work advances one prefill chunk or one
//! decode step at a time, round-robin over the tabs that have a turn running, and commands are
//! read between steps: a cancel lands within one chunk or step, and a long prefill in one tab
//! never freezes another. One place assembles a conversation turn: [`LoadedModel::prompt_ids`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::branch::Held;
use super::budget::ThoughtVocab;
use super::convo_store::ConvoStore;
use super::job::{CHUNK, CHUNK_ALONE, Ctx, Job, JobKind};
use super::kv_store::KvStore;
use super::options::EngineOptions;
use super::protocol::{
    Capabilities, Command, Event, Interrupts, Refusal, TabId, TabSettings, TurnEnd,
};
use super::reply::Reply;
use super::tabs::{Stores, TabState, Tabs};
use super::thinking::{self, Channels, ThinkingPolicy};
use super::tools::{EngineTools, TOOL_POLL};
use super::turn::{Turn, TurnOptions};
use crate::error::{Error, Result};
use gemma_model::checkpoint::LoadedModel;
use gemma_model::tokenizer::Tokenizer;
use gemma_model::tokenizer::template::sandbox::Interrupt;

mod compact;
mod encoding;
mod paths;
mod pictures;
pub(crate) use encoding::Encoding;
pub use pictures::{Lazy, Towers};
mod start;
mod tool_calls;

pub(crate) use self::tool_calls::catalogue_of;

/// How many times a message that overflows its tab's context may make the conversation
/// shorter before it is sent: a compaction (or slide) at the tab's threshold, then, when the
/// summary came out too long, a slide to make it fit at all (see `Worker::submit`).
const OVERFLOW_ROUNDS: u8 = 2;

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
    /// The vision and audio towers, or why the model has none.
    towers: Towers,
    /// The tools the model may call, when the front end started a host.
    tools: Option<EngineTools>,
    /// The stops the front end raised, seen while a command runs (a message's media encoding).
    interrupts: Arc<Interrupts>,
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
            towers: Towers::none(),
            tools: None,
            interrupts: Arc::default(),
        }
    }

    /// The tools the model may call (`None`: none).
    pub fn with_tools(mut self, tools: Option<EngineTools>) -> Self {
        self.tools = tools;
        self
    }

    /// The model's vision and audio towers, or why it has none (told when a picture or a
    /// recording comes).
    pub fn with_towers(mut self, towers: Towers) -> Self {
        self.towers = towers;
        self
    }

    /// Serves `commands` until shutdown; a render of the chat template for a tab whose stop is
    /// raised in `interrupts` is cut short.
    pub fn run(mut self, commands: Receiver<Command>, interrupts: &Arc<Interrupts>) {
        self.interrupts = interrupts.clone();
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
            Command::Submit { tab, text, images } => {
                self.submit(tab, &text, &images, OVERFLOW_ROUNDS)?
            }
            Command::Compact { tab } => self.compact_now(tab)?,
            Command::Regenerate { tab } => self.regenerate(tab)?,
            Command::Continue { tab } => self.continue_answer(tab)?,
            Command::Cancel { tab } => {
                self.stop_encoding(tab);
                self.stop_tools(tab);
                if let Some(job) = self.tabs.get_mut(tab).and_then(|t| t.job.as_mut()) {
                    job.turn.cancel();
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
            Command::Shutdown => {}
            Command::Configure { tab, settings } => self.configure(tab, *settings),
        }
        Ok(())
    }

    /// A tab's settings for its next turns: kept whole; what this model or this engine cannot
    /// honour is said, one `Notice` each (a refused context keeps the one the tab had).
    fn configure(&mut self, tab: TabId, mut settings: TabSettings) {
        let caps = Capabilities {
            thinking: self.lm.supports_thinking(),
            tools: self.tools.as_ref().is_some_and(|t| t.host.is_some()),
            calls: self.tools.is_some(),
            max_context: Some(self.lm.model.config().max_position_embeddings),
            speculation: match self.lm.model.checks_exact() {
                true => crate::protocol::SpecSupport::Exact,
                false => crate::protocol::SpecSupport::NotOnThisBackend,
            },
            drafter: false,
        };
        let default = self.context;
        let t = self.tab(tab);
        let refused = settings.refusals(&t.settings, caps);
        if refused.iter().any(|r| matches!(r, Refusal::Context { .. })) {
            // The tab keeps the context it had, and its settings say so.
            settings.context = t.settings.context;
        }
        t.context = settings.context.unwrap_or(default);
        t.settings = settings;
        // Told, not failed: the other settings apply, and a turn sent after them runs.
        for r in refused {
            self.emit(Event::Notice {
                tab,
                text: r.to_string(),
            });
        }
    }

    /// The tab's job, unless a turn is running: a quiet re-prefill gives way to a new turn.
    fn idle_tab(&mut self, tab: TabId) -> Result<&mut TabState> {
        let t = self.tab(tab);
        if t.job.as_ref().is_some_and(|j| j.kind.quiet()) {
            t.job = None;
        }
        if t.job.is_some() || t.encoding.is_some() {
            return Err(Error::Busy);
        }
        Ok(t)
    }

    /// Advances the next running turn, round-robin, by one prefill chunk or one decode step.
    fn step(&mut self) {
        let Some(tab) = self.tabs.next_busy(self.last) else {
            return;
        };
        self.last = Some(tab);
        let chunk = match self.tabs.busy_count() {
            1 => CHUNK_ALONE,
            _ => CHUNK,
        };
        let cx = Ctx {
            tab,
            model: &self.lm.model,
            tok: self.tok,
            events: &self.events,
        };
        let Some(t) = self.tabs.get_mut(tab) else {
            return;
        };
        if t.encoding.is_some() {
            self.encoding_step(tab);
            return;
        }
        let Some(job) = t.job.as_mut() else { return };
        if job.turn.paused() && !job.kind.quiet() {
            self.tools_step(tab);
            return;
        }
        job.turn.set_chunk(chunk);
        let result = job.advance(&cx, &mut t.session);
        let quiet = job.kind.quiet();
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
        if let JobKind::Summary(pending) = std::mem::replace(&mut job.kind, JobKind::Answer) {
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
            // A turn that goes on with the last answer keeps where that answer starts.
            let at = job.continues.unwrap_or(job.turn.prompt().len());
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
            t.held = job.exchange.take().map(|(mut held, sent)| {
                let mut calls = sent.calls;
                calls.extend(job.tools.take().map(|jt| jt.made).unwrap_or_default());
                held.push(Held {
                    user: sent.user,
                    media: sent.media,
                    answer: std::mem::take(&mut job.answer_text),
                    calls,
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
                kind: JobKind::Settle,
                exchange: None,
                answer_text: String::new(),
                images: t.images.clone(),
                tools: None,
                text_start: 0,
                continues: None,
            });
        }
        // The conversation as it now stands (unchanged when the prompt was not all prefilled):
        // the UI's context meter.
        let tokens = t.convo.len();
        // A settling re-prefill that reaches back before a picture a warm re-attach left
        // unencoded needs its rows too.
        if let Some(mut job) = self.tabs.get_mut(tab).and_then(|t| t.job.take()) {
            let filled = self.fill_rows(tab, &mut job.turn);
            job.images = job.turn.images_from().1.to_vec();
            if let Some(t) = self.tabs.get_mut(tab) {
                t.job = Some(job);
            }
            filled?;
        }
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
