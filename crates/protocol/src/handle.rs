//! A front end's handle on an engine thread, whichever engine it is: commands in over one
//! channel, events out over another; dropping the handle shuts the engine down.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Command, Event, TabId};

/// The engine thread's name (the terminal's panic hook leaves the screen alone for it: its
/// panics become [`Event::EngineStopped`]).
pub const ENGINE_THREAD: &str = "gemma-engine";

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
    interrupts: Arc<Interrupts>,
}

impl EngineControl {
    /// The control of the engine thread `thread` (if it started), which reads `commands` and
    /// watches `interrupts`.
    pub fn new(
        commands: Sender<Command>,
        thread: Option<JoinHandle<()>>,
        interrupts: Arc<Interrupts>,
    ) -> Self {
        Self {
            commands,
            thread,
            interrupts,
        }
    }

    /// Sends a command; false when the engine thread has ended. A stop (Cancel, CloseTab,
    /// Shutdown) is raised in [`Interrupts`] first, so that it reaches work that holds the
    /// engine thread before the command is read.
    pub fn send(&self, command: Command) -> bool {
        self.interrupts.raise(&command);
        self.commands.send(command).is_ok()
    }
}

/// Stops that reach the engine ahead of its command queue: raised by [`EngineControl::send`]
/// for `Cancel`, `CloseTab` and `Shutdown`, watched by work that holds the engine thread between
/// commands (a chat template's render), lowered by the engine when it serves the command.
#[derive(Debug, Default)]
pub struct Interrupts {
    tabs: Mutex<HashSet<TabId>>,
    shutdown: AtomicBool,
}

impl Interrupts {
    fn tabs(&self) -> std::sync::MutexGuard<'_, HashSet<TabId>> {
        self.tabs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Raises the stop `command` is, if it is one.
    pub fn raise(&self, command: &Command) {
        match command {
            Command::Cancel { tab } | Command::CloseTab { tab } => {
                self.tabs().insert(*tab);
            }
            Command::Shutdown => self.shutdown.store(true, Ordering::SeqCst),
            _ => {}
        }
    }

    /// Whether work for `tab` should stop now.
    pub fn raised(&self, tab: TabId) -> bool {
        self.shutdown.load(Ordering::SeqCst) || self.tabs().contains(&tab)
    }

    /// Lowers the stop `command` raised, now that the engine serves it.
    pub fn lower(&self, command: &Command) {
        if let Command::Cancel { tab } | Command::CloseTab { tab } = command {
            self.tabs().remove(tab);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_are_raised_per_tab_until_served() {
        let i = Interrupts::default();
        i.raise(&Command::Cancel { tab: 2 });
        i.raise(&Command::Submit {
            tab: 3,
            text: "hi".into(),
            images: Vec::new(),
        });
        assert!(i.raised(2) && !i.raised(3));
        i.lower(&Command::Cancel { tab: 2 });
        assert!(!i.raised(2));
        i.raise(&Command::Shutdown);
        assert!(i.raised(3), "a shutdown stops every tab");
    }
}
