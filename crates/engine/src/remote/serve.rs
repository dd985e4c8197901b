//! The remote engine's serving loop: once the server is there ([`super::start`]), it applies
//! the UI's commands to its tabs (each a conversation in text, with its settings, its tools and
//! its llama-server slot) and turns finished [`TurnDone`]s into the events the local engine
//! sends: `Committed` (the server's token count) then `Finished` with the reuse the server
//! reports, or `Failed` with what to do. A turn that calls tools goes on in [`super::tooling`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::RemoteOptions;
use super::answer::Budget;
use super::client::Client;
use super::info::ServerInfo;
use super::start::{announce, catalogue, discover, stage};
use super::tab::RemoteTab;
use super::tooling::{ToolTurn, bound_calls};
use super::turn::{TurnDone, TurnJob, estimate, run, stats};
use super::wire::{self, ServerKind, TurnRequest};
use crate::error::Error;
use crate::protocol::{Capabilities, Command, Event, Exchange, TabId, TabSettings, TurnStats};
use crate::tools::{TOOL_POLL, declarations};
use gemma_model::sampling::SamplingParams;
use gemma_tools::host::ToolHost;

pub(super) struct Server {
    pub client: Client,
    pub info: ServerInfo,
    pub events: Sender<Event>,
    pub tabs: HashMap<TabId, RemoteTab>,
    /// llama-server's slots: which tab each holds, and when it was last used.
    slots: Vec<Option<(TabId, Instant)>>,
    done_tx: UnboundedSender<TurnDone>,
    /// Turns started, for each turn's seed.
    turns: u64,
    /// The tools the model may call, when the front end started a host.
    pub host: Option<Arc<ToolHost>>,
    /// Tools approved everywhere this run ("a").
    pub always: BTreeSet<String>,
    /// Written before the close a thought budget forces (llama-server).
    thinking_message: Option<String>,
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
    catalogue(&options, &events);
    let (done_tx, mut done_rx) = unbounded_channel();
    let mut server = Server {
        slots: vec![None; info.slots],
        client,
        info,
        events,
        tabs: HashMap::new(),
        done_tx,
        turns: 0,
        host: options.tools.map(|t| t.0),
        always: BTreeSet::new(),
        thinking_message: options.thinking_message,
    };
    for c in early {
        server.apply(c).await;
    }
    let mut tick = tokio::time::interval(TOOL_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            c = commands.recv() => match c {
                None | Some(Command::Shutdown) => break,
                Some(c) => server.apply(c).await,
            },
            Some(done) = done_rx.recv() => server.finish(done),
            _ = tick.tick(), if server.tools_running() => server.poll_tools(),
        }
    }
    // Running turns are dropped with the runtime: their connections close.
}

impl Server {
    async fn apply(&mut self, c: Command) {
        match c {
            Command::Submit { tab, text, images } => {
                let urls: Result<Vec<String>, String> =
                    images.iter().map(wire::attachment_url).collect();
                match urls {
                    Ok(urls) => self.submit(tab, text, urls),
                    Err(why) => self.fail(tab, &why),
                }
            }
            Command::Regenerate { tab } => self.regenerate(tab),
            Command::Continue { tab } => self.fail(
                tab,
                "a front end's own tools run on the model in this process, not through a server",
            ),
            Command::Cancel { tab } => {
                match self.tabs.get_mut(&tab).and_then(|t| t.running.take()) {
                    Some(cancel) => {
                        let _ = cancel.send(());
                    }
                    // Between two requests: the calls stop, and the turn with them.
                    None => self.stop_tools(tab),
                }
            }
            Command::CloseTab { tab } => self.close(tab),
            Command::Configure { tab, settings } => self.configure(tab, *settings),
            Command::Compact { tab } => self.compact(tab),
            // The server's prefix cache finds what a new path shares with the old one.
            Command::Attach { tab, history, .. }
            | Command::SetPath { tab, history }
            | Command::Fork { tab, history, .. } => self.follow(tab, history).await,
            Command::DecideTool {
                tab,
                call,
                decision,
            } => self.decide(tab, call, decision),
            Command::Shutdown => {}
        }
    }

    /// Answers the tab's last message again: its answer is replaced by the new one.
    fn regenerate(&mut self, tab: TabId) {
        let t = self.tabs.entry(tab).or_default();
        match t.history.pop() {
            Some(last) if !t.busy() => {
                let urls = t.pictures.pop().unwrap_or_default();
                t.replies.truncate(t.history.len());
                self.submit(tab, last.user, urls);
            }
            Some(last) => {
                t.history.push(last);
                self.fail(tab, &Error::Busy.to_string());
            }
            None => self.fail(tab, "there is no answer to regenerate in this tab"),
        }
    }

    /// Forgets the tab: its running request is cancelled, its slot freed.
    fn close(&mut self, tab: TabId) {
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

    /// The tab follows `history` (attached, moved to another path, forked): its exchanges with
    /// their pictures and recordings, counted by the server when it can.
    async fn follow(&mut self, tab: TabId, history: Vec<Exchange>) {
        let messages = {
            let t = self.tabs.entry(tab).or_default();
            // Each exchange's pictures and recordings go with it again (one whose file is
            // gone goes without it).
            t.pictures = history
                .iter()
                .map(|ex| {
                    let urls = ex.media.iter().map(wire::attachment_url);
                    urls.filter_map(std::result::Result::ok).collect()
                })
                .collect();
            t.replies = history
                .iter()
                .map(|ex| super::calls::rebuilt_replies(&ex.answer, &ex.calls))
                .collect();
            t.history = history;
            wire::messages(t.settings.system_prompt(), &t.history, &[], &[], None)
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

    /// A tab's settings, kept whole; what the server cannot honour is said. The server keeps
    /// its own context, and its template decides thinking (its switch is a guess from outside).
    fn configure(&mut self, tab: TabId, settings: TabSettings) {
        let caps = Capabilities {
            thinking: true,
            tools: self.host.is_some(),
            calls: false,
            max_context: None,
            speculation: crate::protocol::SpecSupport::Remote,
            drafter: false,
        };
        let refused = settings.refusals(&self.tabs.entry(tab).or_default().settings, caps);
        for r in refused {
            let text = r.to_string();
            let _ = self.events.send(Event::Notice { tab, text });
        }
        self.tabs.entry(tab).or_default().settings = settings;
    }

    pub(super) fn fail(&self, tab: TabId, error: &str) {
        let _ = self.events.send(Event::Failed {
            tab,
            error: error.to_string(),
        });
    }

    /// The slot for `tab`: its own, else a free one, else the least recently used idle one.
    pub(super) fn slot_for(&mut self, tab: TabId) -> Option<usize> {
        let now = Instant::now();
        let running = |t: TabId| self.tabs.get(&t).is_some_and(RemoteTab::busy);
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
        if self.tabs.get(&tab).is_some_and(RemoteTab::busy) {
            return self.fail(tab, &Error::Busy.to_string());
        }
        let slot = match self.info.kind {
            ServerKind::LlamaServer => self.slot_for(tab),
            ServerKind::OpenAi | ServerKind::GemmaChat => None,
        };
        self.turns += 1;
        let declared = self.declared(tab);
        let tools = (!declared.is_empty()).then(|| declarations(&declared));
        let t = self.tabs.entry(tab).or_default();
        // A new seed each turn (from the tab's, as the local engine does), so that a regenerate
        // answers differently; within 31 bits, which every server takes.
        let sampling = SamplingParams {
            seed: t.settings.sampling.seed.wrapping_add(self.turns) & 0x7fff_ffff,
            ..t.settings.sampling.clone()
        };
        let mut body = wire::body(&TurnRequest {
            model: &self.info.model,
            system: t.settings.system_prompt(),
            history: &t.history,
            pictures: &t.pictures,
            replies: &t.replies,
            tools: tools.as_ref(),
            tool_choice: t.settings.tool_choice.as_str(),
            user: (&text, &urls),
            sampling: &sampling,
            max_tokens: t.settings.max_new_tokens,
            stop: &t.settings.stop,
            thinking: t.settings.thinking,
            thought_budget: (t.settings.thought_budget, self.thinking_message.as_deref()),
            slot,
            kind: self.info.kind,
        });
        if t.settings.thinking
            && t.settings.thought_budget.is_some()
            && !self.info.kind.takes_thought_budget()
            && !std::mem::replace(&mut t.budget_told, true)
        {
            let _ = self.events.send(Event::Notice {
                tab,
                text: "this server does not take a thought budget: thinking is not limited".into(),
            });
        }
        if tools.is_some()
            && let Some(host) = &self.host
        {
            bound_calls(&mut body, host.limits().max_calls);
        }
        let messages_after = after(&body);
        t.pending = urls;
        let budget = Budget::for_tokens(t.settings.max_new_tokens);
        if tools.is_some() {
            let had_history = !t.history.is_empty();
            t.turn = Some(ToolTurn::new(
                declared,
                t.settings.tool_choice,
                slot,
                budget,
                t.tokens,
                had_history,
            ));
        }
        self.spawn(TurnJob {
            tab,
            user: text,
            body,
            slot,
            budget,
            messages_after,
            quiet: false,
        });
    }

    /// Starts `job`'s request as a task of its own; a cancel reaches it through the tab.
    pub(super) fn spawn(&mut self, job: TurnJob) {
        let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel();
        self.tabs.entry(job.tab).or_default().running = Some(cancel_tx);
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
        if let Some(c) = t.compacting.take() {
            return self.compacted(d, c);
        }
        if t.turn.is_some() {
            return self.round_done(d);
        }
        let s = stats(&d, t.tokens, !t.history.is_empty());
        self.commit(d, s, Vec::new());
    }

    /// Ends a turn: the exchange joins the history (with `replies`, the messages of its tool
    /// round-trips), the server's count is committed, and `Finished` with `s` or `Failed` is
    /// told.
    pub(super) fn commit(&mut self, d: TurnDone, s: TurnStats, replies: Vec<Value>) {
        let Some(t) = self.tabs.get_mut(&d.tab) else {
            return;
        };
        // The history mirrors the transcript the user sees: the message, and what came of it
        // (a cut-off answer, or none when the turn failed at once).
        t.pictures.push(std::mem::take(&mut t.pending));
        t.replies.push(replies);
        t.history.push(Exchange {
            user: d.user.clone(),
            answer: d.answer.clone(),
            ..Exchange::default()
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
                let _ = self.events.send(Event::Finished {
                    tab: d.tab,
                    end,
                    stats: s,
                });
            }
            Err(e) => {
                let mut why = self.client.scrub(&e.to_string());
                if why.contains("jinja") {
                    why.push_str(
                        " (tools need llama-server started with --jinja; or turn them off for \
                         this tab: /tools)",
                    );
                }
                self.fail(d.tab, &why);
            }
        }
    }
}

/// The conversation after a request's answer (an empty answer stands for it), for the server's
/// count when usage is missing.
pub(super) fn after(body: &Value) -> Vec<Value> {
    let mut m = body["messages"].as_array().cloned().unwrap_or_default();
    m.push(serde_json::json!({"role": "assistant", "content": ""}));
    m
}
