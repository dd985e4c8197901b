//! A front end's handle on an engine thread, whichever engine it is: commands in over one
//! channel, events out over another; dropping the handle shuts the engine down.

use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Command, Event};

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
}

impl EngineControl {
    /// The control of the engine thread `thread` (if it started), which reads `commands`.
    pub fn new(commands: Sender<Command>, thread: Option<JoinHandle<()>>) -> Self {
        Self { commands, thread }
    }

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
