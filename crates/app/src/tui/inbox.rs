//! The event loop's inbox: the user's input (keys, pastes, mouse, resizes), config reloads and
//! save errors come in one channel; the engine's events in another, taken a slice at a time when
//! the first one wakes the loop. A key therefore never waits behind a flood of tokens (a server
//! streaming without end): Esc is read within one slice, and the engine's cancel bypasses what
//! it had queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::app::Msg;
use gemma_protocol::Event;

/// Most engine events taken between two looks at the input.
const SLICE: usize = 256;

/// What wakes the event loop.
pub(super) enum Inbox {
    /// Input, a config reload, an error.
    App(Msg),
    /// Engine events wait in [`EngineEvents`].
    Engine,
}

/// The engine's events, apart from the input.
pub(super) struct EngineEvents {
    rx: Receiver<Event>,
    /// A wake is in the inbox (or about to be): no second one is sent.
    pending: Arc<AtomicBool>,
    wake: Sender<Inbox>,
}

impl EngineEvents {
    /// Moves `events` into a channel of their own on a thread, waking the loop through `wake`
    /// once for each batch.
    pub(super) fn forward(events: Receiver<Event>, wake: Sender<Inbox>) -> Self {
        let (tx, rx) = channel();
        let pending = Arc::new(AtomicBool::new(false));
        let (flag, waker) = (pending.clone(), wake.clone());
        std::thread::spawn(move || {
            for e in events {
                if tx.send(e).is_err() {
                    break;
                }
                if !flag.swap(true, Ordering::SeqCst) && waker.send(Inbox::Engine).is_err() {
                    break;
                }
            }
        });
        Self { rx, pending, wake }
    }

    /// The events that came, at most [`SLICE`] of them; if more wait, the loop is woken again
    /// behind whatever input came meanwhile.
    pub(super) fn take(&self) -> Vec<Event> {
        // Cleared before the channel is read: an event sent after the read wakes the loop anew.
        self.pending.store(false, Ordering::SeqCst);
        let mut out = Vec::new();
        while let Ok(e) = self.rx.try_recv() {
            out.push(e);
            if out.len() == SLICE {
                if !self.pending.swap(true, Ordering::SeqCst) {
                    let _ = self.wake.send(Inbox::Engine);
                }
                break;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use gemma_protocol::TabId;

    #[test]
    fn a_key_is_read_within_one_slice_of_a_token_flood() {
        // The state the forwarding thread leaves behind a runaway stream: a flood of tokens
        // queued, one wake in the inbox, and then the user's Esc.
        let (engine_tx, rx) = channel();
        let (wake, inbox) = channel();
        for _ in 0..10 * SLICE {
            let text = "x".to_string();
            engine_tx
                .send(Event::Token {
                    tab: TabId::default(),
                    text,
                })
                .expect("sent");
        }
        let events = EngineEvents {
            rx,
            pending: Arc::new(AtomicBool::new(true)),
            wake: wake.clone(),
        };
        wake.send(Inbox::Engine).expect("sent");
        let esc = KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE);
        wake.send(Inbox::App(Msg::Key(esc))).expect("sent");
        let mut before = 0;
        loop {
            match inbox.recv().expect("a message") {
                Inbox::Engine => before += events.take().len(),
                Inbox::App(Msg::Key(k)) => {
                    assert_eq!(k, esc);
                    break;
                }
                Inbox::App(_) => unreachable!(),
            }
        }
        assert_eq!(before, SLICE, "the key waited behind {before} tokens");
        // The rest still comes, a slice per wake.
        let mut after = 0;
        while let Ok(Inbox::Engine) = inbox.try_recv() {
            after += events.take().len();
        }
        assert_eq!(before + after, 10 * SLICE);
    }
}
