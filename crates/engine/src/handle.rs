//! The engine thread: [`spawn`] loads the model on a new thread and serves it
//! ([`super::worker`]; [`super::remote`] serves a server's model through the same handle, an
//! [`EngineHandle`] that sends [`Command`]s and receives [`Event`]s); [`EngineOptions`] (in
//! `options`) are its memory limits and policies.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use super::convo_store::ConvoStore;
use super::kv_store::{KvStore, fingerprint};
use super::options::EngineOptions;
use super::protocol::{
    Command, ENGINE_THREAD, EngineControl, EngineHandle, Event, Interrupts, ProgressUnit,
};
use super::tabs::Stores;
use super::thinking::Channels;
use super::tools::EngineTools;
use super::worker::{Lazy, Worker};
use gemma_model::checkpoint::LoadedModel;
use gemma_model::error::Result;
use gemma_model::tokenizer::Tokenizer;

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
            unit: ProgressUnit::Layers,
        });
    }

    /// Reports `done` of `total` bytes downloaded in the stage `text`.
    pub fn bytes(&self, text: &str, done: u64, total: u64) {
        let _ = self.events.send(Event::Loading {
            stage: text.to_string(),
            done: done as usize,
            total: total as usize,
            unit: ProgressUnit::Bytes,
        });
    }

    /// Reports `done` of `total` layers loaded.
    pub fn layers(&self, done: usize, total: usize) {
        let _ = self.events.send(Event::Loading {
            stage: "loading weights".into(),
            done,
            total,
            unit: ProgressUnit::Layers,
        });
    }
}

/// Starts the engine thread. `load` runs on it and reports its progress.
pub fn spawn<F>(options: EngineOptions, load: F) -> EngineHandle
where
    F: FnOnce(&Progress) -> Result<LoadedModel> + Send + 'static,
{
    start(move |event_tx, command_rx, interrupts| {
        serve(options, load, event_tx, command_rx, interrupts)
    })
}

/// Starts an engine thread that runs `serve` (the local engine's or the remote one's): a panic
/// there becomes [`Event::EngineStopped`].
pub(super) fn start<F>(serve: F) -> EngineHandle
where
    F: FnOnce(Sender<Event>, Receiver<Command>, Arc<Interrupts>) + Send + 'static,
{
    let (commands, command_rx) = channel();
    let (event_tx, events) = channel();
    let interrupts = Arc::new(Interrupts::default());
    let watched = interrupts.clone();
    let thread = std::thread::Builder::new()
        .name(ENGINE_THREAD.into())
        .spawn(move || {
            let tx = event_tx.clone();
            let run = std::panic::AssertUnwindSafe(move || serve(event_tx, command_rx, watched));
            if let Err(payload) = std::panic::catch_unwind(run) {
                // A bug, not bad input: the UI says so and stays usable (its chats are saved).
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "an unknown error".into());
                let _ = tx.send(Event::EngineStopped {
                    error: format!(
                        "the engine stopped on an internal error ({what}); your chats are saved: \
                         restart gemma-chat, and please report this"
                    ),
                });
            }
        })
        .ok();
    EngineHandle {
        control: EngineControl::new(commands, thread, interrupts),
        events,
    }
}

/// The engine thread's life: load, check, serve until shutdown.
fn serve<F>(
    options: EngineOptions,
    load: F,
    event_tx: Sender<Event>,
    command_rx: Receiver<Command>,
    interrupts: Arc<Interrupts>,
) where
    F: FnOnce(&Progress) -> Result<LoadedModel>,
{
    let progress = Progress {
        events: event_tx.clone(),
    };
    let mut lm = match load(&progress) {
        Ok(lm) => lm,
        Err(e) => {
            let _ = event_tx.send(Event::LoadFailed {
                error: e.to_string(),
            });
            return;
        }
    };
    // The vision and audio towers, when the model has them: why not is told when a picture or
    // a recording comes.
    // Their specs now (the marks prompts need, a GGUF decoder's image masking); their weights
    // when the first picture or recording needs them.
    let mmproj = options.mmproj.as_deref();
    let vision = Lazy::new(gemma_model::vision::deferred_for(&mut lm, mmproj, None));
    let audio = Lazy::new(gemma_model::audio::deferred_for(&lm, mmproj));
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
        tool_calls: crate::tools::ToolIds::of(tok).is_some(),
        generation: lm.generation,
    });
    let kv = options
        .kv_dir
        .clone()
        .filter(|_| options.kv_disk_bytes > 0)
        .map(|dir| KvStore::new(dir, &lm.path, &lm.model, options.kv_disk_bytes));
    let channels = Channels::of(tok).filter(|_| lm.supports_thinking());
    let convos = options
        .convo_dir
        .clone()
        .map(|dir| ConvoStore::new(dir, fingerprint(&lm.path)));
    let stores = Stores { kv, convos };
    let tools = tools_for(&options, tok, &event_tx);
    Worker::new(&lm, tok, event_tx, options, context, stores, channels)
        .with_towers(crate::worker::Towers {
            vision: Rc::new(vision),
            audio: Rc::new(audio),
        })
        .with_tools(tools)
        .run(command_rx, &interrupts);
}

/// The engine's tools over the front end's host, when the model can call them; the UI hears of
/// every change of the host's catalogue. Without a host, a model that calls tools still gets
/// them for a front end's own tools.
fn tools_for(
    options: &EngineOptions,
    tok: &Tokenizer,
    events: &Sender<Event>,
) -> Option<EngineTools> {
    let Some(host) = options.tools.clone().map(|t| t.0) else {
        let limits = options.call_limits.clone();
        return crate::tools::ToolIds::of(tok)
            .and_then(|_| EngineTools::new(None, tok).ok())
            .map(|t| t.with_limits(limits));
    };
    match EngineTools::new(Some(host.clone()), tok) {
        Ok(tools) => {
            let (weak, tx) = (Arc::downgrade(&host), events.clone());
            host.set_changed(Box::new(move || {
                if let Some(host) = weak.upgrade() {
                    let _ = tx.send(crate::worker::catalogue_of(&host));
                }
            }));
            Some(tools)
        }
        Err(why) => {
            let _ = events.send(Event::Tools {
                servers: vec![crate::protocol::ServerInfo {
                    name: "model".into(),
                    transport: String::new(),
                    state: "failed".into(),
                    tools: Vec::new(),
                    error: Some(why),
                }],
                tools: Vec::new(),
            });
            None
        }
    }
}
