//! The remote engine's start: it waits for the server (retrying every 2 s while it is down or
//! loading, giving up with a clear message when it refuses or the wait is over), then says what
//! is ready: the server's model, kind and context, and where the token counts come from; with
//! tools, their catalogue, again whenever it changes.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use super::RemoteOptions;
use super::client::{Client, RemoteError};
use super::info::ServerInfo;
use super::wire::{self, ServerKind};
use crate::protocol::{Command, Event, ProgressUnit};
use gemma_model::sampling::SamplingLayer;

/// A start-up stage for the UI.
pub(super) fn stage(text: String) -> Event {
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
pub(super) async fn discover(
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
pub(super) async fn announce(
    client: &Client,
    info: &ServerInfo,
    options: &RemoteOptions,
    events: &Sender<Event>,
) {
    let context = info.context.or(options.context_length).unwrap_or(8192);
    let kind = match info.kind {
        ServerKind::LlamaServer => format!("llama-server, {} slots", info.slots),
        ServerKind::OpenAi => "OpenAI-compatible".into(),
        ServerKind::GemmaChat => "gemma-chat serve".into(),
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
        // A front end's own tools are declared only to a model in this process.
        tool_calls: false,
        generation: SamplingLayer::default(),
    });
}

/// Tells the UI the host's tools now, and again whenever they change.
pub(super) fn catalogue(options: &RemoteOptions, events: &Sender<Event>) {
    let Some(tools) = &options.tools else {
        return;
    };
    let host = &tools.0;
    let _ = events.send(crate::worker::catalogue_of(host));
    let (weak, tx) = (std::sync::Arc::downgrade(host), events.clone());
    host.set_changed(Box::new(move || {
        if let Some(host) = weak.upgrade() {
            let _ = tx.send(crate::worker::catalogue_of(&host));
        }
    }));
}
