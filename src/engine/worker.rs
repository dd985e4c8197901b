//! The engine thread: owns the one copy of the weights and every tab's session, serves
//! [`Command`]s and streams [`Event`]s. Work advances one prefill chunk or one decode step at a
//! time, round-robin over the tabs that have a turn running, and commands are read between
//! steps: a stop lands within one chunk or step, and a long prefill in one tab never freezes
//! another.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::Instant;

use super::protocol::{Command, Event, TabId};
use super::session::{Reuse, Session, Tier, TurnEnd, TurnStats};
use super::stop;
use crate::error::{Error, Result};
use crate::generate::LoadedModel;
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::stream::TextStream;
use crate::tokenizer::{Tokenizer, turn_markers};

/// Prompt tokens per prefill step.
const CHUNK: usize = 128;

/// The UI's end of the engine.
#[derive(Debug)]
pub struct EngineHandle {
    commands: Sender<Command>,
    /// Events from the engine, in order.
    pub events: Receiver<Event>,
    thread: Option<JoinHandle<()>>,
}

impl EngineHandle {
    /// Sends a command; false when the engine thread has ended.
    pub fn send(&self, command: Command) -> bool {
        self.commands.send(command).is_ok()
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Memory limits for the sessions' KV state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Bytes of KV state allowed on the compute device (`None`: no limit). Past it, the least
    /// recently used idle tab moves to host memory.
    pub memory_budget: Option<usize>,
    /// Bytes of KV state allowed in host memory (`None`: no limit). Past it, a tab drops to text.
    pub host_budget: Option<usize>,
}

/// Starts the engine thread. `load` runs on it and reports progress as `(done, total)`.
pub fn spawn<F>(options: EngineOptions, load: F) -> EngineHandle
where
    F: FnOnce(&mut dyn FnMut(usize, usize)) -> Result<LoadedModel> + Send + 'static,
{
    let (commands, command_rx) = channel();
    let (event_tx, events) = channel();
    let thread = std::thread::Builder::new()
        .name("gemma-engine".into())
        .spawn(move || {
            let lm = match load(&mut |done, total| {
                let _ = event_tx.send(Event::Loading { done, total });
            }) {
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
            let _ = event_tx.send(Event::Ready {
                model: cfg.model_type.clone(),
                context_length: cfg.max_position_embeddings,
            });
            Worker {
                lm: &lm,
                tok,
                events: event_tx,
                tabs: BTreeMap::new(),
                stop_ids: lm.chat_stop_ids(),
                last: None,
                options,
                clock: 0,
            }
            .run(command_rx);
        })
        .ok();
    EngineHandle {
        commands,
        events,
        thread,
    }
}

struct Tab {
    session: Session,
    /// The conversation in ids; the session holds it all but a final stop id.
    convo: Vec<u32>,
    /// Where the last model answer starts in `convo`, for regenerate.
    last_answer: Option<usize>,
    sampling: SamplingParams,
    max_new_tokens: usize,
    stop_strings: Vec<String>,
    job: Option<Job>,
    /// When the tab last started a turn (LRU order for eviction).
    last_used: u64,
    /// The tier last reported to the UI.
    tier: Tier,
}

struct Job {
    prompt: Vec<u32>,
    reuse: Reuse,
    reused: usize,
    prefilled: usize,
    logits: Option<Vec<f32>>,
    sampler: Sampler,
    stream: TextStream,
    answer: Vec<u32>,
    /// Decoded text not shown yet (it may be the start of a stop string).
    pending: String,
    /// Bytes of answer text shown so far.
    shown: usize,
    started: Instant,
    prefill_s: f64,
    ttft_s: f64,
    stop: bool,
}

struct Worker<'a> {
    lm: &'a LoadedModel,
    tok: &'a Tokenizer,
    events: Sender<Event>,
    tabs: BTreeMap<TabId, Tab>,
    stop_ids: Vec<u32>,
    last: Option<TabId>,
    options: EngineOptions,
    clock: u64,
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

    fn tab(&mut self, tab: TabId) -> &mut Tab {
        let model = &self.lm.model;
        self.tabs.entry(tab).or_insert_with(|| Tab {
            session: Session::new(model),
            convo: Vec::new(),
            last_answer: None,
            sampling: SamplingParams::default(),
            max_new_tokens: 512,
            stop_strings: Vec::new(),
            job: None,
            last_used: 0,
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
            Command::Shutdown => {}
        }
    }

    fn submit(&mut self, tab: TabId, text: &str) -> Result<()> {
        let bos = self.lm.model.config().bos_token_id;
        let turn = self.lm.user_turn(text)?;
        let tok = self.tok;
        let t = self.tab(tab);
        if t.job.is_some() {
            return Err(Error::Invalid(
                "a turn is still running in this tab; stop it first".into(),
            ));
        }
        let mut prompt = t.convo.clone();
        if prompt.is_empty() {
            prompt.push(bos);
        } else {
            prompt.extend(tok.encode("\n")?);
        }
        prompt.extend(tok.encode(&turn)?);
        self.start(tab, prompt)
    }

    fn regenerate(&mut self, tab: TabId) -> Result<()> {
        let t = self.tab(tab);
        if t.job.is_some() {
            return Err(Error::Invalid(
                "a turn is still running in this tab; stop it first".into(),
            ));
        }
        let at = t
            .last_answer
            .ok_or_else(|| Error::Invalid("there is no answer to regenerate yet".into()))?;
        let prompt = t.convo[..at].to_vec();
        self.start(tab, prompt)
    }

    /// Starts a turn whose whole conversation is `prompt`.
    fn start(&mut self, tab: TabId, prompt: Vec<u32>) -> Result<()> {
        let limit = self.lm.model.config().max_position_embeddings;
        self.clock += 1;
        let now = self.clock;
        let t = self.tab(tab);
        let needed = prompt.len() + t.max_new_tokens;
        if needed > limit {
            return Err(Error::ContextLengthExceeded { needed, limit });
        }
        t.last_used = now;
        let reuse = t.session.prepare(&prompt)?;
        let reused = t.session.position();
        t.job = Some(Job {
            sampler: Sampler::new(t.sampling.clone()),
            prompt,
            reuse,
            reused,
            prefilled: 0,
            logits: None,
            stream: TextStream::new(),
            answer: Vec::new(),
            pending: String::new(),
            shown: 0,
            started: Instant::now(),
            prefill_s: 0.0,
            ttft_s: 0.0,
            stop: false,
        });
        self.enforce_budget(tab);
        Ok(())
    }

    /// Moves least recently used idle tabs to host memory, or to text when host memory is full
    /// too, until the device budget holds. The active and generating tabs never move.
    fn enforce_budget(&mut self, active: TabId) {
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

    /// Advances the next running turn by one prefill chunk or one decode step.
    fn step(&mut self) {
        let next = self
            .tabs
            .iter()
            .filter(|(_, t)| t.job.is_some())
            .map(|(id, _)| *id)
            .find(|id| self.last.is_none_or(|l| *id > l))
            .or_else(|| {
                self.tabs
                    .iter()
                    .find(|(_, t)| t.job.is_some())
                    .map(|(id, _)| *id)
            });
        let Some(tab) = next else { return };
        self.last = Some(tab);
        if let Err(e) = self.advance(tab) {
            if let Some(t) = self.tabs.get_mut(&tab) {
                t.job = None;
            }
            self.emit(Event::Failed {
                tab,
                error: e.to_string(),
            });
        }
    }

    fn advance(&mut self, tab: TabId) -> Result<()> {
        let (model, tok) = (&self.lm.model, self.tok);
        let never = AtomicBool::new(false);
        let Some(t) = self.tabs.get_mut(&tab) else {
            return Ok(());
        };
        let max_new = t.max_new_tokens;
        let Some(job) = t.job.as_mut() else {
            return Ok(());
        };
        if job.stop {
            return self.finish(tab, TurnEnd::Stopped);
        }
        let todo = job.prompt.len() - job.reused;
        if job.prefilled < todo {
            let from = job.reused + job.prefilled;
            let end = job.prompt.len();
            let mut to = (from + CHUNK).min(end);
            if to == end && to - from > 1 {
                // The last prompt token gets a step of its own, after a snapshot (below).
                to -= 1;
            }
            if from == end - 1 {
                // A user-turn boundary: regenerate and edits rewind here.
                t.session.snapshot();
            }
            let out =
                t.session
                    .prefill(model, &job.prompt[from..to], CHUNK, &never, &mut |_, _| {})?;
            job.prefilled += to - from;
            job.logits = out;
            if job.prefilled == todo {
                job.prefill_s = job.started.elapsed().as_secs_f64();
            }
            let event = Event::Prefill {
                tab,
                done: job.prefilled,
                total: todo,
            };
            let _ = self.events.send(event);
            return Ok(());
        }
        if job.answer.len() >= max_new {
            return self.finish(tab, TurnEnd::Length);
        }
        let logits = job
            .logits
            .take()
            .ok_or_else(|| Error::Backend("no logits to sample from".into()))?;
        let id = job.sampler.sample(&logits);
        if job.answer.is_empty() {
            job.ttft_s = job.started.elapsed().as_secs_f64();
        }
        if self.stop_ids.contains(&id) {
            return self.finish(tab, TurnEnd::Stop(id));
        }
        job.answer.push(id);
        let delta = job.stream.push(tok, id)?;
        job.pending.push_str(&delta);
        let (show, stop_at) = stop::scan(&job.pending, &t.stop_strings);
        if show > 0 {
            let text: String = job.pending.drain(..show).collect();
            job.shown += text.len();
            let _ = self.events.send(Event::Token { tab, text });
        }
        if stop_at.is_some() {
            return self.finish(tab, TurnEnd::StopString);
        }
        job.logits = t.session.prefill(model, &[id], 1, &never, &mut |_, _| {})?;
        Ok(())
    }

    fn finish(&mut self, tab: TabId, end: TurnEnd) -> Result<()> {
        let tok = self.tok;
        let family = self.lm.model.config().family;
        let Some(t) = self.tabs.get_mut(&tab) else {
            return Ok(());
        };
        let Some(mut job) = t.job.take() else {
            return Ok(());
        };
        if end == TurnEnd::StopString {
            // Keep only the tokens whose text was shown; rewind the session past the rest.
            let mut keep = job.answer.len();
            while keep > 0 && tok.decode(&job.answer[..keep], true)?.len() > job.shown {
                keep -= 1;
            }
            job.answer.truncate(keep);
            let resident = job.prompt.len() + keep;
            if t.session.position() > resident && !t.session.rewind(resident) {
                t.session.mark_dirty();
            }
        } else {
            job.pending.push_str(&job.stream.finish(tok)?);
            if !job.pending.is_empty() {
                let text = std::mem::take(&mut job.pending);
                let _ = self.events.send(Event::Token { tab, text });
            }
        }
        let todo = job.prompt.len() - job.reused;
        let decode_s = (job.started.elapsed().as_secs_f64() - job.prefill_s).max(1e-9);
        let stats = TurnStats {
            reuse: job.reuse,
            reused_tokens: job.reused,
            prefilled_tokens: job.prefilled,
            prefill_tok_s: job.prefilled as f64 / job.prefill_s.max(1e-9),
            decode_tok_s: job.answer.len() as f64 / decode_s,
            ttft_s: job.ttft_s,
            generated_tokens: job.answer.len(),
        };
        if job.prefilled == todo {
            // The turn happened: commit it to the conversation, closed whatever ended it.
            let at = job.prompt.len();
            let mut convo = std::mem::take(&mut job.prompt);
            convo.append(&mut job.answer);
            match end {
                TurnEnd::Stop(id) => convo.push(id),
                TurnEnd::Length | TurnEnd::Stopped | TurnEnd::StopString => {
                    convo.extend(tok.encode(turn_markers(family).1)?)
                }
            }
            t.convo = convo;
            t.last_answer = Some(at);
        }
        let _ = self.events.send(Event::Finished { tab, end, stats });
        self.enforce_budget(tab);
        Ok(())
    }
}
