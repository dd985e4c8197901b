//! The conversations kept warm ([`Pool`]): one engine tab each, each conversation a chat of the
//! engine's. A request takes the idle slot whose conversation shares the longest start with its
//! messages — so a client that sends the whole history every turn finds its conversation
//! resident and only the new message is prefilled — else the slot used longest ago: its
//! conversation is parked (the engine keeps its ids and KV state on disk when its tab moves to
//! another chat) and brought back when its client returns. At most
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
    /// Conversations that left their slot, newest last.
    parked: Vec<Parked>,
    waiting: usize,
    clock: u64,
    /// Chats named so far.
    named: u64,
}

struct Slot {
    tab: TabId,
    /// The chat its conversation is (`None` before its first).
    chat: Option<String>,
    /// The messages (their keys) of the conversation the tab holds.
    held: Vec<String>,
    /// The tab's events; `None` while a lease has them (the slot is answering).
    events: Option<UnboundedReceiver<Event>>,
    /// When it was last taken ([`Inner::clock`]).
    used: u64,
}

/// A conversation parked: its chat and its messages.
struct Parked {
    chat: String,
    held: Vec<String>,
}

/// Keys two requests share when they are one conversation: the system prompt and the first
/// message.
const SAME: usize = 2;
/// Parked conversations kept, per slot.
const PARKED_PER_SLOT: usize = 4;

/// The chat a slot's tab is to be attached to before the turn: its name, and how many of the
/// request's exchanges it held when parked (0: a new conversation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attach {
    pub chat: String,
    pub exchanges: usize,
}

/// A slot taken by one request; given back when dropped.
pub(crate) struct Lease {
    pool: Arc<Pool>,
    index: usize,
    /// The slot's tab.
    pub tab: TabId,
    /// The tab's events.
    pub events: UnboundedReceiver<Event>,
    /// The chat the tab moves to first, when the request is not the slot's conversation.
    pub attach: Option<Attach>,
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
                        chat: None,
                        held: Vec::new(),
                        events: Some(events),
                        used: 0,
                    })
                    .collect(),
                parked: Vec::new(),
                waiting: 0,
                clock: 0,
                named: 0,
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
                                inner.running(),
                                inner.waiting
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
    /// ago), if any is idle; a parked conversation sharing more comes back into it.
    fn take(self: &Arc<Self>, inner: &mut Inner, keys: &[String]) -> Option<Lease> {
        if inner.running() >= self.parallel {
            return None;
        }
        let (shared, _, mut index) = inner
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.events.is_some())
            .map(|(i, s)| (common(&s.held, keys), std::cmp::Reverse(s.used), i))
            .max()?;
        let parked = (inner.parked.iter().enumerate())
            .map(|(i, p)| (common(&p.held, keys), i))
            .max()
            .filter(|&(n, _)| n >= SAME && n > shared);
        let attach = match parked {
            Some((_, i)) => {
                // Back into the slot used longest ago.
                index = (inner.slots.iter().enumerate())
                    .filter(|(_, s)| s.events.is_some())
                    .min_by_key(|(_, s)| s.used)
                    .map(|(i, _)| i)?;
                let p = inner.parked.remove(i);
                let exchanges = p.held.len().saturating_sub(1) / 2;
                inner.park(index, Some(p.chat.clone()), p.held);
                Some(Attach {
                    chat: p.chat,
                    exchanges,
                })
            }
            None if shared < SAME => {
                let chat = inner.new_chat();
                inner.park(index, Some(chat.clone()), Vec::new());
                Some(Attach { chat, exchanges: 0 })
            }
            None => None,
        };
        inner.clock += 1;
        let slot = &mut inner.slots[index];
        slot.used = inner.clock;
        Some(Lease {
            pool: self.clone(),
            index,
            tab: slot.tab,
            events: slot.events.take()?,
            attach,
            held: Vec::new(),
        })
    }
}

impl Inner {
    /// Slots answering now: those whose events a lease holds.
    fn running(&self) -> usize {
        self.slots.iter().filter(|s| s.events.is_none()).count()
    }

    /// Slot `index` takes the conversation `chat` holding `held`; the one it had is parked
    /// (the oldest parked one forgotten past the bound).
    fn park(&mut self, index: usize, chat: Option<String>, held: Vec<String>) {
        let slot = &mut self.slots[index];
        let old = std::mem::replace(&mut slot.chat, chat);
        let old_held = std::mem::replace(&mut slot.held, held);
        if let Some(chat) = old.filter(|_| !old_held.is_empty()) {
            self.parked.push(Parked {
                chat,
                held: old_held,
            });
        }
        let bound = self.slots.len() * PARKED_PER_SLOT;
        if self.parked.len() > bound {
            self.parked.remove(0);
        }
    }

    /// A chat name no slot holds, from a cycle as long as the slots and the parked
    /// conversations together; a parked conversation under it is forgotten (its files are the
    /// new one's).
    fn new_chat(&mut self) -> String {
        let names = self.slots.len() * (1 + PARKED_PER_SLOT);
        loop {
            self.named += 1;
            let chat = format!("serve-{}", self.named % names as u64);
            if self.slots.iter().all(|s| s.chat.as_deref() != Some(&chat)) {
                self.parked.retain(|p| p.chat != chat);
                return chat;
            }
        }
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

    #[tokio::test]
    async fn a_conversation_that_loses_its_slot_is_parked_and_comes_back_with_its_exchanges() {
        let p = pool(1, 1, 4);
        let mut a = p.acquire(&keys(&["s", "u1"])).await.expect("a slot");
        let first = a
            .attach
            .clone()
            .expect("a new conversation is a chat of its own");
        assert_eq!(first.exchanges, 0);
        a.keep(keys(&["s", "u1", "a1"]));
        drop(a);
        // The same conversation goes on in its slot: nothing to attach.
        let mut a = p
            .acquire(&keys(&["s", "u1", "a1", "u2"]))
            .await
            .expect("a slot");
        assert_eq!(a.attach, None);
        a.keep(keys(&["s", "u1", "a1", "u2", "a2"]));
        drop(a);
        let mut b = p.acquire(&keys(&["s", "other"])).await.expect("a slot");
        let second = b.attach.clone().expect("another conversation");
        assert_ne!(second.chat, first.chat);
        b.keep(keys(&["s", "other", "b1"]));
        drop(b);
        // The first comes back from where it was parked, with its two exchanges.
        let back = p
            .acquire(&keys(&["s", "u1", "a1", "u2", "a2", "u3"]))
            .await
            .expect("a slot");
        assert_eq!(
            back.attach,
            Some(Attach {
                chat: first.chat,
                exchanges: 2
            })
        );
        drop(back);
        // And the second is parked in its turn.
        let b = p
            .acquire(&keys(&["s", "other", "b1", "x"]))
            .await
            .expect("a slot");
        assert_eq!(b.attach.clone().map(|a| a.chat), Some(second.chat));
    }
}
