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
            // Every turn is told when the engine stops: by its event, or its channel closing.
            let mut why = "the engine thread ended".to_string();
            while let Ok(e) = events.recv() {
                match (e.tab(), e) {
                    (Some(tab), e) => {
                        if let Some(tx) = routes.get(&tab) {
                            let _ = tx.send(e);
                        }
                    }
                    (None, Event::EngineStopped { error }) => {
                        why = error;
                        break;
                    }
                    (None, _) => {}
                }
            }
            *flag.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            for tx in routes.values() {
                let _ = tx.send(Event::EngineStopped { error: why.clone() });
            }
        });
    if let Err(e) = routed {
        *stopped.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(format!("cannot start the event thread: {e}"));
    }
    (Arc::new(Engine { control, stopped }), receivers)
}
