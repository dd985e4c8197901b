//! The remote engine's serving loop: it waits for the server (retrying while it is down, giving
//! up with a clear message when it refuses), then applies the UI's commands to its tabs (each a
//! conversation in text, with its settings and its llama-server slot) and turns finished
//! [`TurnDone`]s into the events the local engine sends: `Committed` (the server's token count)
//! then `Finished` with the reuse the server reports, or `Failed` with what to do.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::RemoteOptions;
use super::answer::Budget;
use super::client::{Client, RemoteError};
use super::info::ServerInfo;
use super::turn::{TurnDone, TurnJob, estimate, run, stats};
use super::wire::{self, ServerKind, TurnRequest};
use crate::protocol::{Command, Event, Exchange, ProgressUnit, TabId};
use gemma_model::sampling::{SamplingLayer, SamplingParams};

/// A tab as the remote engine keeps it.
struct RemoteTab {
    history: Vec<Exchange>,
    /// Each exchange's pictures, as data URLs, one entry per `history` entry (none for a history
    /// the UI sent).
    pictures: Vec<Vec<String>>,
    /// The running turn's pictures, which join `pictures` when it ends.
    pending: Vec<String>,
    system: Option<String>,
    thinking: bool,
    sampling: SamplingParams,
    max_new_tokens: usize,
    stop: Vec<String>,
    /// Tokens of the conversation by the server's count (0: none yet).
    tokens: usize,
    /// The running turn's cancel switch.
    running: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Default for RemoteTab {
    fn default() -> Self {
        Self {
            history: Vec::new(),
            pictures: Vec::new(),
            pending: Vec::new(),
            system: None,
            thinking: false,
            sampling: SamplingParams::greedy(),
            max_new_tokens: 512,
            stop: Vec::new(),
            tokens: 0,
            running: None,
        }
    }
}

struct Server {
    client: Client,
    info: ServerInfo,
    events: Sender<Event>,
    tabs: HashMap<TabId, RemoteTab>,
    /// llama-server's slots: which tab each holds, and when it was last used.
    slots: Vec<Option<(TabId, Instant)>>,
    done_tx: UnboundedSender<TurnDone>,
    /// Turns started, for each turn's seed.
    turns: u64,
}

/// Connects, then serves until shutdown.
pub(super) async fn serve(
    options: RemoteOptions,
    events: Sender<Event>,
    mut commands: UnboundedReceiver<Command>,
) {
    let client = match Client::new(&options) {
        Ok(c) => c,
        Err(e) => {
            let _ = events.send(Event::LoadFailed {
                error: e.to_string(),
            });
            return;
        }
    };
    let _ = events.send(stage(format!("connecting to {}", client.url())));
    // Commands that come while the server is down wait here (the UI holds turns until Ready).
    let mut early = Vec::new();
    let Some(info) = discover(&client, &options, &events, &mut commands, &mut early).await else {
        return;
    };
    announce(&client, &info, &options, &events).await;
    let (done_tx, mut done_rx) = unbounded_channel();
    let mut server = Server {
        slots: vec![None; info.slots],
        client,
        info,
        events,
        tabs: HashMap::new(),
        done_tx,
        turns: 0,
    };
    for c in early {
        server.apply(c).await;
    }
    loop {
        tokio::select! {
            c = commands.recv() => match c {
                None | Some(Command::Shutdown) => break,
                Some(c) => server.apply(c).await,
            },
            Some(done) = done_rx.recv() => server.finish(done),
        }
    }
    // Running turns are dropped with the runtime: their connections close.
}

/// A start-up stage for the UI.
fn stage(text: String) -> Event {
    Event::Loading {
        stage: text,
        done: 0,
        total: 0,
        unit: ProgressUnit::Layers,
    }
}

/// Asks the server what it serves, every 2 s while it is down or loading (commands that come
/// meanwhile go to `early`), for at most [`RemoteOptions::give_up_after`]; `None` when it
/// refuses for good or the wait is over (said), or the UI shuts down.
async fn discover(
    client: &Client,
    options: &RemoteOptions,
    events: &Sender<Event>,
    commands: &mut UnboundedReceiver<Command>,
    early: &mut Vec<Command>,
) -> Option<ServerInfo> {
    let started = Instant::now();
    loop {
        // One try takes at most what is left of the wait, when there is a limit.
        let left = options
            .give_up_after
            .map_or(Duration::MAX, |l| l.saturating_sub(started.elapsed()));
        let tried = tokio::time::timeout(left, client.discover(options.model.as_deref()))
            .await
            .unwrap_or_else(|_| Err(client.stalled()));
        let waiting = match tried {
            Ok(info) => return Some(info),
            Err(
                e @ (RemoteError::Unreachable { .. }
                | RemoteError::Timeout { .. }
                | RemoteError::Stalled { .. }
                | RemoteError::Dropped { .. }),
            ) => client.scrub(&e.to_string()),
            Err(RemoteError::Status { status: 503, .. }) => {
                format!("the server at {} is loading its model", client.url())
            }
            Err(e) => {
                let _ = events.send(Event::LoadFailed {
                    error: client.scrub(&e.to_string()),
                });
                return None;
            }
        };
        if let Some(limit) = options.give_up_after
            && started.elapsed() >= limit
        {
            let _ = events.send(Event::LoadFailed {
                error: format!(
                    "{waiting}; gave up after {} s (waiting longer is [engine] idle_timeout_s)",
                    started.elapsed().as_secs()
                ),
            });
            return None;
        }
        let _ = events.send(stage(format!("{waiting} — retrying every 2 s")));
        let wait = tokio::time::sleep(Duration::from_secs(2));
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => break,
                c = commands.recv() => match c {
                    None | Some(Command::Shutdown) => return None,
                    Some(c) => early.push(c),
                },
            }
        }
    }
}

/// Says the engine is ready: the server's model, kind and context, and where the context meter's
/// counts come from (the server's count, or an estimate).
async fn announce(
    client: &Client,
    info: &ServerInfo,
    options: &RemoteOptions,
    events: &Sender<Event>,
) {
    let context = info.context.or(options.context_length).unwrap_or(8192);
    let kind = match info.kind {
        ServerKind::LlamaServer => format!("llama-server, {} slots", info.slots),
        ServerKind::OpenAi => "OpenAI-compatible".into(),
    };
    let probe = [serde_json::json!({"role": "user", "content": "hi"})];
    let counted = match client.count(info, &probe).await {
        Some(_) => "tokens counted by the server",
        None => "tokens estimated: the server cannot count",
    };
    let model = wire::clip(&client.scrub(&info.model));
    let _ = events.send(Event::Ready {
        model: format!("{model} @ {} ({kind}; {counted})", client.url()),
        context_length: context,
        thinking: info.thinking,
        generation: SamplingLayer::default(),
    });
}

impl Server {
    async fn apply(&mut self, c: Command) {
        match c {
            Command::Submit { tab, text, images } => {
                let urls: Result<Vec<String>, String> =
                    images.iter().map(|a| wire::data_url(&a.path)).collect();
                match urls {
                    Ok(urls) => self.submit(tab, text, urls),
                    Err(why) => self.fail(tab, &why),
                }
            }
            Command::Regenerate { tab } => {
                let t = self.tabs.entry(tab).or_default();
                match t.history.pop() {
                    Some(last) if t.running.is_none() => {
                        // Its answer is replaced by the new one.
                        let urls = t.pictures.pop().unwrap_or_default();
                        self.submit(tab, last.user, urls);
                    }
                    Some(last) => {
                        t.history.push(last);
                        self.fail(tab, "a turn is still running in this tab; stop it first");
                    }
                    None => self.fail(tab, "there is no answer to regenerate in this tab"),
                }
            }
            Command::Cancel { tab } => {
                if let Some(cancel) = self.tabs.get_mut(&tab).and_then(|t| t.running.take()) {
                    let _ = cancel.send(());
                }
            }
            Command::CloseTab { tab } => {
                if let Some(mut t) = self.tabs.remove(&tab)
                    && let Some(cancel) = t.running.take()
                {
                    let _ = cancel.send(());
                }
                for s in self.slots.iter_mut() {
                    if s.is_some_and(|(owner, _)| owner == tab) {
                        *s = None;
                    }
                }
            }
            Command::SetSampling {
                tab,
                sampling,
                max_new_tokens,
                stop,
            } => {
                let t = self.tabs.entry(tab).or_default();
                t.sampling = sampling;
                t.max_new_tokens = max_new_tokens;
                t.stop = stop;
            }
            Command::SetThinking { tab, on } => self.tabs.entry(tab).or_default().thinking = on,
            Command::SetSystem { tab, text } => self.tabs.entry(tab).or_default().system = text,
            // The server's context is its own: nothing to change here.
            Command::SetContext { .. } => {}
            // The server's prefix cache finds what a new path shares with the old one.
            Command::Attach { tab, history, .. }
            | Command::SetPath { tab, history }
            | Command::Fork { tab, history, .. } => {
                let messages = {
                    let t = self.tabs.entry(tab).or_default();
                    t.pictures = vec![Vec::new(); history.len()];
                    t.history = history;
                    wire::messages(t.system.as_deref(), &t.history, &[], None)
                };
                let tokens = if messages.is_empty() {
                    Some(0)
                } else {
                    self.client.count(&self.info, &messages).await
                };
                let t = self.tabs.entry(tab).or_default();
                t.tokens = tokens.unwrap_or_else(|| estimate(&messages));
                let _ = self.events.send(Event::Committed {
                    tab,
                    tokens: t.tokens,
                });
            }
            Command::Shutdown => {}
        }
    }

    fn fail(&self, tab: TabId, error: &str) {
        let _ = self.events.send(Event::Failed {
            tab,
            error: error.to_string(),
        });
    }

    /// The slot for `tab`: its own, else a free one, else the least recently used idle one.
    fn slot_for(&mut self, tab: TabId) -> Option<usize> {
        let now = Instant::now();
        let running = |t: TabId| self.tabs.get(&t).is_some_and(|t| t.running.is_some());
        let pick = self
            .slots
            .iter()
            .position(|s| s.is_some_and(|(owner, _)| owner == tab))
            .or_else(|| self.slots.iter().position(Option::is_none))
            .or_else(|| {
                self.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.is_some_and(|(owner, _)| !running(owner)))
                    .min_by_key(|(_, s)| s.map(|(_, used)| used))
                    .map(|(i, _)| i)
            })?;
        self.slots[pick] = Some((tab, now));
        Some(pick)
    }

    fn submit(&mut self, tab: TabId, text: String, urls: Vec<String>) {
        if self.tabs.get(&tab).is_some_and(|t| t.running.is_some()) {
            return self.fail(tab, "a turn is still running in this tab; stop it first");
        }
        let slot = match self.info.kind {
            ServerKind::LlamaServer => self.slot_for(tab),
            ServerKind::OpenAi => None,
        };
        self.turns += 1;
        let t = self.tabs.entry(tab).or_default();
        // A new seed each turn (from the tab's, as the local engine does), so that a regenerate
        // answers differently; within 31 bits, which every server takes.
        let sampling = SamplingParams {
            seed: t.sampling.seed.wrapping_add(self.turns) & 0x7fff_ffff,
            ..t.sampling.clone()
        };
        let body = wire::body(&TurnRequest {
            model: &self.info.model,
            system: t.system.as_deref(),
            history: &t.history,
            pictures: &t.pictures,
            user: (&text, &urls),
            sampling: &sampling,
            max_tokens: t.max_new_tokens,
            stop: &t.stop,
            thinking: t.thinking,
            slot,
            kind: self.info.kind,
        });
        let mut messages_after = wire::messages(
            t.system.as_deref(),
            &t.history,
            &t.pictures,
            Some((&text, &urls)),
        );
        t.pending = urls;
        messages_after.push(serde_json::json!({"role": "assistant", "content": ""}));
        let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel();
        t.running = Some(cancel_tx);
        let job = TurnJob {
            tab,
            user: text,
            body,
            slot,
            budget: Budget::for_tokens(t.max_new_tokens),
            messages_after,
        };
        let (client, info, events, done) = (
            self.client.clone(),
            self.info.clone(),
            self.events.clone(),
            self.done_tx.clone(),
        );
        tokio::spawn(async move {
            let _ = done.send(run(client, info, job, events, cancel_rx).await);
        });
    }

    fn finish(&mut self, d: TurnDone) {
        // A closed tab's turn ends with it.
        let Some(t) = self.tabs.get_mut(&d.tab) else {
            return;
        };
        t.running = None;
        let before = t.tokens;
        let had_history = !t.history.is_empty();
        // The history mirrors the transcript the user sees: the message, and what came of it
        // (a cut-off answer, or none when the turn failed at once).
        t.pictures.push(std::mem::take(&mut t.pending));
        t.history.push(Exchange {
            user: d.user.clone(),
            answer: d.answer.clone(),
        });
        let counted = d
            .usage
            .as_ref()
            .map(|u| u.prompt_tokens.saturating_add(u.completion_tokens))
            .or(d.counted);
        if let Some(n) = counted {
            t.tokens = n;
        }
        let _ = self.events.send(Event::Committed {
            tab: d.tab,
            tokens: t.tokens,
        });
        match d.end {
            Ok(end) => {
                let stats = stats(&d, before, had_history);
                let _ = self.events.send(Event::Finished {
                    tab: d.tab,
                    end,
                    stats,
                });
            }
            Err(e) => self.fail(d.tab, &self.client.scrub(&e.to_string())),
        }
    }
}
