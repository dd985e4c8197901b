//! The engine thread: owns the one copy of the weights and every tab's session, serves
//! [`Command`]s and streams [`Event`]s. Work advances one prefill chunk or one decode step at a
//! time, round-robin over the tabs that have a turn running, and commands are read between
//! steps: a stop lands within one chunk or step, and a long prefill in one tab never freezes
//! another.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::kv_store::KvStore;
use super::protocol::{Command, Event, TabId};
use super::session::{Session, Tier};
use super::thinking::{Channels, Router, ThinkingPolicy};
use super::turn::Job;
use crate::error::{Error, Result};
use crate::generate::LoadedModel;
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::Tokenizer;
use crate::tokenizer::template::{Conversation, TemplateError};

/// The UI's end of the engine: commands in, events out.
#[derive(Debug)]
pub struct EngineHandle {
    /// Where commands go; dropping it shuts the engine down.
    pub control: EngineControl,
    /// Events from the engine, in order.
    pub events: Receiver<Event>,
}

impl EngineHandle {
    /// Sends a command; false when the engine thread has ended.
    pub fn send(&self, command: Command) -> bool {
        self.control.send(command)
    }
}

/// The command side of the engine. Dropping it sends [`Command::Shutdown`] and waits a moment
/// for the thread to end (not for a model load, which cannot be interrupted).
#[derive(Debug)]
pub struct EngineControl {
    commands: Sender<Command>,
    thread: Option<JoinHandle<()>>,
}

impl EngineControl {
    /// Sends a command; false when the engine thread has ended.
    pub fn send(&self, command: Command) -> bool {
        self.commands.send(command).is_ok()
    }
}

impl Drop for EngineControl {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            // A step takes at most one prefill chunk; a load may take much longer, and then the
            // thread is left to end with the process.
            let deadline = Instant::now() + Duration::from_secs(5);
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// Start-up progress reports, for the `load` function given to [`spawn`].
#[derive(Debug)]
pub struct Progress {
    events: Sender<Event>,
}

impl Progress {
    /// Reports a stage of start-up, e.g. fetching the demo model.
    pub fn stage(&self, text: &str) {
        let _ = self.events.send(Event::Loading {
            stage: text.to_string(),
            done: 0,
            total: 0,
        });
    }

    /// Reports `done` of `total` layers loaded.
    pub fn layers(&self, done: usize, total: usize) {
        let _ = self.events.send(Event::Loading {
            stage: "loading weights".into(),
            done,
            total,
        });
    }
}

/// Memory limits for the sessions' KV state, and what becomes of thoughts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Bytes of KV state allowed on the compute device (`None`: no limit). Past it, the least
    /// recently used idle tab moves to host memory.
    pub memory_budget: Option<usize>,
    /// Bytes of KV state allowed in host memory (`None`: no limit). Past it, a tab drops to text.
    pub host_budget: Option<usize>,
    /// Context limit per tab in tokens (`None`: the model's maximum; never more than it).
    pub context_length: Option<usize>,
    /// Whether the user asked for `context_length` explicitly: then a value over the model's
    /// maximum is refused (at load) instead of capped.
    pub context_strict: bool,
    /// Where warm tabs' KV state is saved on shutdown and found again on restore (`None`: no
    /// warm restart).
    pub kv_dir: Option<std::path::PathBuf>,
    /// Most bytes of disk for those snapshots.
    pub kv_disk_bytes: u64,
    /// What a finished turn keeps of its thought (Gemma 4 thinking).
    pub thinking_policy: ThinkingPolicy,
    /// Tests only: the tab's next turn fails after this many forward steps.
    #[doc(hidden)]
    pub inject_failure: Option<(TabId, usize)>,
}

/// Starts the engine thread. `load` runs on it and reports its progress.
pub fn spawn<F>(options: EngineOptions, load: F) -> EngineHandle
where
    F: FnOnce(&Progress) -> Result<LoadedModel> + Send + 'static,
{
    let (commands, command_rx) = channel();
    let (event_tx, events) = channel();
    let thread = std::thread::Builder::new()
        .name("gemma-engine".into())
        .spawn(move || {
            let progress = Progress {
                events: event_tx.clone(),
            };
            let lm = match load(&progress) {
                Ok(lm) => lm,
                Err(e) => {
                    let _ = event_tx.send(Event::LoadFailed {
                        error: e.to_string(),
                    });
                    return;
                }
            };
            let Some(tok) = lm.tokenizer.as_ref() else {
                let _ = event_tx.send(Event::LoadFailed {
                    error: "this model has no tokenizer, so it cannot chat".into(),
                });
                return;
            };
            let cfg = lm.model.config();
            let max = cfg.max_position_embeddings;
            if let Some(c) = options
                .context_length
                .filter(|c| options.context_strict && *c > max)
            {
                let _ = event_tx.send(Event::LoadFailed {
                    error: format!(
                        "model.context_length = {c} is over this model's maximum ({max}); set \
                         it to {max} or less in the config"
                    ),
                });
                return;
            }
            let context = options.context_length.map_or(max, |c| c.clamp(1, max));
            let _ = event_tx.send(Event::Ready {
                model: cfg.model_type.clone(),
                context_length: context,
                thinking: lm.supports_thinking(),
                generation: crate::config::resolve::generation_defaults(&lm.path),
            });
            let kv = options
                .kv_dir
                .clone()
                .filter(|_| options.kv_disk_bytes > 0)
                .map(|dir| KvStore::new(dir, &lm.path, &lm.model, options.kv_disk_bytes));
            Worker {
                lm: &lm,
                kv,
                tok,
                events: event_tx,
                tabs: BTreeMap::new(),
                stop_ids: lm.chat_stop_ids(),
                channels: Channels::of(tok).filter(|_| lm.supports_thinking()),
                last: None,
                options,
                context,
                clock: 0,
                template_warned: false,
            }
            .run(command_rx);
        })
        .ok();
    EngineHandle {
        control: EngineControl { commands, thread },
        events,
    }
}

pub(super) struct Tab {
    pub session: Session,
    /// The conversation in ids, up to the end of the last answer (the template closes it when
    /// the next turn comes); the session holds all of it once a turn has settled.
    pub convo: Vec<u32>,
    /// The ids of the conversation header in `convo`, right after BOS.
    pub header: Vec<u32>,
    /// Where the last model answer starts in `convo`, for regenerate.
    pub last_answer: Option<usize>,
    pub sampling: SamplingParams,
    pub max_new_tokens: usize,
    pub stop_strings: Vec<String>,
    /// Gemma 4 thinking for the next turns.
    pub thinking: bool,
    /// The system prompt for the next turns.
    pub system: Option<String>,
    pub job: Option<Job>,
    /// When the tab last started a turn (LRU order for eviction).
    pub last_used: u64,
    /// The tier last reported to the UI.
    pub tier: Tier,
    /// Its context limit in tokens.
    pub context: usize,
}

pub(super) struct Worker<'a> {
    pub lm: &'a LoadedModel,
    pub tok: &'a Tokenizer,
    pub events: Sender<Event>,
    pub tabs: BTreeMap<TabId, Tab>,
    pub stop_ids: Vec<u32>,
    /// Channel markers when the model thinks.
    pub channels: Option<Channels>,
    /// The tab served last (round-robin).
    pub last: Option<TabId>,
    pub options: EngineOptions,
    /// Warm-restart snapshots.
    kv: Option<KvStore>,
    /// Context limit per tab, in tokens.
    pub context: usize,
    clock: u64,
    /// The checkpoint's chat template failed and the user was told.
    template_warned: bool,
}

impl Worker<'_> {
    fn run(mut self, commands: Receiver<Command>) {
        loop {
            let busy = self.tabs.values().any(|t| t.job.is_some());
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
                    self.persist();
                    return;
                }
                self.command(c);
                next = commands.try_recv().ok();
            }
            self.step();
        }
    }

    pub(super) fn emit(&self, e: Event) {
        let _ = self.events.send(e);
    }

    fn tab(&mut self, tab: TabId) -> &mut Tab {
        let model = &self.lm.model;
        let context = self.context;
        self.tabs.entry(tab).or_insert_with(|| Tab {
            session: Session::new(model),
            convo: Vec::new(),
            header: Vec::new(),
            last_answer: None,
            sampling: SamplingParams::default(),
            max_new_tokens: 512,
            stop_strings: Vec::new(),
            thinking: false,
            system: None,
            job: None,
            last_used: 0,
            context,
            tier: Tier::Device,
        })
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
            Command::Stop { tab } => {
                if let Some(job) = self.tabs.get_mut(&tab).and_then(|t| t.job.as_mut()) {
                    job.stop = true;
                }
            }
            Command::CloseTab { tab } => {
                self.tabs.remove(&tab);
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
    fn idle_tab(&mut self, tab: TabId) -> Result<&mut Tab> {
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
        if convo.len() > 1 + header && convo.last().is_some_and(|i| self.stop_ids.contains(i)) {
            convo.pop();
        }
        let c = Conversation {
            system: None,
            thinking: false,
            continues: false,
        };
        let (bare, _) = self.lm.next_turn(&c, "").ok()?;
        let opening = self.tok.encode(&bare.header).ok()?;
        let after = convo.get(1 + header..)?;
        let header = if !opening.is_empty() && after.starts_with(&opening) {
            header + opening.len()
        } else {
            header
        };
        (header < convo.len()).then_some((convo, header))
    }

    fn submit(&mut self, tab: TabId, text: &str) -> Result<()> {
        let t = self.tab(tab);
        let system = t.system.clone();
        let c = Conversation {
            system: system.as_deref(),
            thinking: t.thinking,
            continues: !t.convo.is_empty(),
        };
        let (turn, failed) = self.lm.next_turn(&c, text)?;
        if let Some(e) = failed {
            self.template_failed(tab, e);
        }
        let lm = self.lm;
        let t = self.idle_tab(tab)?;
        // History stays in ids; only the header (when it changed: thinking toggled, a new system
        // prompt) and the new turn are rendered. A changed header rewinds the session to it, and
        // the turn says so.
        let (prompt, header) = lm.prompt_ids(&t.convo, t.header.len(), &turn)?;
        self.start(tab, prompt, header)
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
        let limit = self.tab(tab).context;
        self.clock += 1;
        let now = self.clock;
        let inject = self
            .options
            .inject_failure
            .take_if(|(t, _)| *t == tab)
            .map(|(_, n)| n);
        let channels = self.channels;
        let t = self.tab(tab);
        // The prompt must fit with room for an answer; an answer that then reaches the limit
        // ends there and says so (`context full`), never truncating the history.
        let needed = prompt.len() + 1;
        if needed > limit {
            return Err(Error::ContextLengthExceeded { needed, limit });
        }
        t.last_used = now;
        let reuse = t.session.prepare(&prompt)?;
        if let Some(n) = inject {
            t.session.fail_after(n);
        }
        let reused = t.session.position();
        let mut job = Job::new(prompt, header, reuse, reused);
        // A new seed per turn (from the tab's), so that a regenerate can answer differently.
        let mut sampling = t.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(now);
        job.sampler = Sampler::new(sampling);
        job.router = Router::new(channels);
        t.job = Some(job);
        self.enforce_budget(tab);
        Ok(())
    }

    /// Saves the idle tabs' KV state for a warm restart, most recently used first, within the
    /// disk cap. Snapshots of earlier runs are removed first.
    fn persist(&mut self) {
        let Some(kv) = &self.kv else { return };
        kv.clear();
        let mut tabs: Vec<&Tab> = self
            .tabs
            .values()
            .filter(|t| t.job.is_none() && !t.convo.is_empty())
            .collect();
        tabs.sort_by_key(|t| std::cmp::Reverse(t.last_used));
        let mut used = 0;
        for t in tabs {
            used += kv.save(&t.convo, &t.session, used).unwrap_or(0);
        }
    }

    /// Moves least recently used idle tabs to host memory, or to text when host memory is full
    /// too, until the device budget holds. The active and generating tabs never move.
    pub(super) fn enforce_budget(&mut self, active: TabId) {
        if let Some(budget) = self.options.memory_budget {
            loop {
                let used: usize = self.tabs.values().map(|t| t.session.device_bytes()).sum();
                if used <= budget {
                    break;
                }
                let victim = self
                    .tabs
                    .iter()
                    .filter(|(id, t)| {
                        **id != active && t.job.is_none() && t.session.device_bytes() > 0
                    })
                    .min_by_key(|(_, t)| t.last_used)
                    .map(|(id, _)| *id);
                let Some(victim) = victim else { break };
                let host_used: usize = self.tabs.values().map(|t| t.session.host_bytes()).sum();
                let t = self.tabs.get_mut(&victim).expect("victim exists");
                let fits = self
                    .options
                    .host_budget
                    .is_none_or(|h| host_used + t.session.device_bytes() <= h);
                if fits {
                    t.session.offload();
                } else {
                    t.session.evict();
                }
            }
        }
        self.report_tiers();
    }

    /// Tells the UI about every tab whose tier changed.
    fn report_tiers(&mut self) {
        let mut changed = Vec::new();
        for (id, t) in self.tabs.iter_mut() {
            let tier = t.session.tier();
            if tier != t.tier {
                t.tier = tier;
                changed.push((*id, tier));
            }
        }
        for (tab, tier) in changed {
            self.emit(Event::TabState { tab, tier });
        }
    }
}
