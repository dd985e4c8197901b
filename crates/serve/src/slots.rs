//! The conversations kept warm ([`Pool`]): one engine tab each. A request takes the idle slot
//! whose conversation shares the longest start with its messages — so a client that sends the
//! whole history every turn finds its conversation resident and only the new message is
//! prefilled — else the slot used longest ago, whose conversation it replaces. At most
//! `parallel` slots answer at once (the engine interleaves them step by step); the others keep
//! their conversations, which the engine moves to host memory when its device budget is spent
//! and back when they are used. While no slot may start, a request waits in a queue of bounded
//! length; past it the answer is 503.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::StatusCode;
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::ApiError;
use gemma_protocol::{Event, TabId};

/// The slots and the requests waiting for one.
pub(crate) struct Pool {
    inner: Mutex<Inner>,
    freed: Notify,
    queue: usize,
    parallel: usize,
}

struct Inner {
    slots: Vec<Slot>,
    waiting: usize,
    /// Slots answering now.
    running: usize,
    clock: u64,
}

struct Slot {
    tab: TabId,
    /// The messages (their keys) of the conversation the tab holds.
    held: Vec<String>,
    /// The tab's events; `None` while a lease has them (the slot is answering).
    events: Option<UnboundedReceiver<Event>>,
    /// When it was last taken ([`Inner::clock`]).
    used: u64,
}

/// A slot taken by one request; given back when dropped.
pub(crate) struct Lease {
    pool: Arc<Pool>,
    index: usize,
    /// The slot's tab.
    pub tab: TabId,
    /// The tab's events.
    pub events: UnboundedReceiver<Event>,
    /// What the slot holds after this request ([`Lease::keep`]); nothing known when unset.
    held: Vec<String>,
}

impl Pool {
    /// Slots for `tabs`, each with its events; at most `parallel` answer at once and `queue`
    /// requests wait.
    pub fn new(
        slots: Vec<(TabId, UnboundedReceiver<Event>)>,
        parallel: usize,
        queue: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                slots: slots
                    .into_iter()
                    .map(|(tab, events)| Slot {
                        tab,
                        held: Vec::new(),
                        events: Some(events),
                        used: 0,
                    })
                    .collect(),
                waiting: 0,
                running: 0,
                clock: 0,
            }),
            freed: Notify::new(),
            queue,
            parallel: parallel.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The best idle slot for a conversation whose messages are `keys`, waiting for one while
    /// all answer; 503 when the queue is full.
    pub async fn acquire(self: &Arc<Self>, keys: &[String]) -> Result<Lease, ApiError> {
        let mut queued: Option<Queued<'_>> = None;
        loop {
            {
                let mut inner = self.lock();
                if let Some(lease) = self.take(&mut inner, keys) {
                    return Ok(lease);
                }
                if queued.is_none() {
                    if inner.waiting >= self.queue {
                        return Err(ApiError::status(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "server_busy",
                            format!(
                                "{} answers run and {} requests wait already: try again \
                                 shortly",
                                inner.running, inner.waiting
                            ),
                        ));
                    }
                    inner.waiting += 1;
                    queued = Some(Queued(self.as_ref()));
                }
            }
            self.freed.notified().await;
        }
    }

    /// Takes the idle slot sharing the most messages with `keys` (ties: the one used longest
    /// ago), if any is idle.
    fn take(self: &Arc<Self>, inner: &mut Inner, keys: &[String]) -> Option<Lease> {
        if inner.running >= self.parallel {
            return None;
        }
        let best = inner
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.events.is_some())
            .map(|(i, s)| (common(&s.held, keys), std::cmp::Reverse(s.used), i))
            .max()?;
        let (_, _, index) = best;
        inner.clock += 1;
        inner.running += 1;
        let slot = &mut inner.slots[index];
        slot.used = inner.clock;
        Some(Lease {
            pool: self.clone(),
            index,
            tab: slot.tab,
            events: slot.events.take()?,
            held: Vec::new(),
        })
    }
}

/// Keys both lists start with.
fn common(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A place in the queue, left when dropped (the request was served or its client left).
struct Queued<'a>(&'a Pool);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.waiting = inner.waiting.saturating_sub(1);
    }
}

impl Lease {
    /// The slot holds the conversation `keys` after this request.
    pub fn keep(&mut self, keys: Vec<String>) {
        self.held = keys;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (_, dummy) = tokio::sync::mpsc::unbounded_channel();
        let events = std::mem::replace(&mut self.events, dummy);
        {
            let mut inner = self.pool.lock();
            inner.running = inner.running.saturating_sub(1);
            let slot = &mut inner.slots[self.index];
            slot.held = std::mem::take(&mut self.held);
            slot.events = Some(events);
        }
        self.pool.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    fn pool(n: usize, parallel: usize, queue: usize) -> Arc<Pool> {
        Pool::new(
            (1..=n as u64).map(|t| (t, unbounded_channel().1)).collect(),
            parallel,
            queue,
        )
    }

    fn keys(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn a_conversation_comes_back_to_its_slot_and_a_new_one_takes_the_oldest() {
        let p = pool(2, 2, 4);
        let mut a = p.acquire(&keys(&["u1"])).await.expect("a slot");
        a.keep(keys(&["u1", "a1"]));
        let tab_a = a.tab;
        drop(a);
        let b = p.acquire(&keys(&["x"])).await.expect("a slot");
        assert_ne!(
            b.tab, tab_a,
            "a new conversation takes the slot used longest ago"
        );
        drop(b);
        let again = p.acquire(&keys(&["u1", "a1", "u2"])).await.expect("a slot");
        assert_eq!(again.tab, tab_a);
    }

    #[tokio::test]
    async fn requests_wait_for_a_slot_and_past_the_queue_get_503() {
        let p = pool(1, 1, 1);
        let held = p.acquire(&[]).await.expect("a slot");
        let waiter = {
            let p = p.clone();
            tokio::spawn(async move { p.acquire(&[]).await.map(|l| l.tab) })
        };
        tokio::task::yield_now().await;
        let busy = p.acquire(&[]).await.err().expect("the queue is full");
        assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
        assert_eq!(waiter.await.expect("joined").expect("served"), 1);
    }

    #[tokio::test]
    async fn idle_slots_keep_their_conversations_while_parallel_ones_answer() {
        let p = pool(3, 1, 4);
        let mut a = p.acquire(&keys(&["a"])).await.expect("a slot");
        a.keep(keys(&["a", "x"]));
        let tab_a = a.tab;
        // One answer at a time: a second request waits until the first is done.
        let second = {
            let p = p.clone();
            tokio::spawn(async move { p.acquire(&keys(&["b"])).await.map(|l| l.tab) })
        };
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "only one slot answers at once");
        drop(a);
        let tab_b = second.await.expect("joined").expect("served");
        assert_ne!(
            tab_b, tab_a,
            "a new conversation leaves the first one's slot alone"
        );
        let back = p.acquire(&keys(&["a", "x", "c"])).await.expect("a slot");
        assert_eq!(back.tab, tab_a);
    }
}
