//! The engine's side of the server: commands go out through its control, and one thread reads
//! its events and hands each to the turn waiting on that tab. When the engine stops, every
//! waiting turn is told.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use gemma_protocol::{Command, EngineControl, EngineHandle, Event, TabId};

/// The engine as the server's turns use it.
pub(crate) struct Engine {
    control: EngineControl,
    stopped: Arc<Mutex<Option<String>>>,
}

impl Engine {
    /// Sends a command; false when the engine has ended.
    pub fn send(&self, c: Command) -> bool {
        self.control.send(c)
    }

    /// Why the engine stopped, if it did.
    pub fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Starts routing `handle`'s events to one receiver per tab of `tabs`.
pub(crate) fn start(
    handle: EngineHandle,
    tabs: &[TabId],
) -> (Arc<Engine>, Vec<UnboundedReceiver<Event>>) {
    let EngineHandle { control, events } = handle;
    let stopped = Arc::new(Mutex::new(None));
    let mut routes: HashMap<TabId, UnboundedSender<Event>> = HashMap::new();
    let mut receivers = Vec::new();
    for &t in tabs {
        let (tx, rx) = unbounded_channel();
        routes.insert(t, tx);
        receivers.push(rx);
    }
    let flag = stopped.clone();
    let routed = std::thread::Builder::new()
        .name("gemma-serve-events".into())
        .spawn(move || {
            while let Ok(e) = events.recv() {
                match e.tab() {
                    Some(tab) => {
                        if let Some(tx) = routes.get(&tab) {
                            let _ = tx.send(e);
                        }
                    }
                    None => {
                        if let Event::EngineStopped { error } = &e {
                            *flag.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.clone());
                            for tx in routes.values() {
                                let _ = tx.send(e.clone());
                            }
                        }
                    }
                }
            }
            // The channel closed: the engine thread is gone.
            let mut s = flag.lock().unwrap_or_else(|p| p.into_inner());
            s.get_or_insert_with(|| "the engine thread ended".into());
            for tx in routes.values() {
                let _ = tx.send(Event::EngineStopped {
                    error: s.clone().unwrap_or_default(),
                });
            }
        });
    if let Err(e) = routed {
        *stopped.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(format!("cannot start the event thread: {e}"));
    }
    (Arc::new(Engine { control, stopped }), receivers)
}
