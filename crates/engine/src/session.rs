//! One conversation's warm state: its KV cache and its resident token ids, always of the same
//! length. A new turn reuses the longest prefix the session already holds and prefills only the
//! rest; it re-prefills the history only when it must, and says why ([`Reuse`]).
//!
//! The contract: `resident.len() == position()` after every call, failed and cancelled ones
//! included; never an empty prefill; a failure leaves the session empty and marked, never
//! half-updated (`tests/sessions.rs`). A turn drives a session through [`super::turn::Turn`].

use burn::tensor::{Device, Tensor};

use super::images::{Held, MediaSpan, chunk_end, shared, softs};
use super::protocol::{Reuse, Tier};

use gemma_model::error::{Error, Result};
use gemma_model::model::kv_cache::{HostKv, SlidingSnapshot};
use gemma_model::model::{Gemma, KvCache, Logits};
use gemma_model::sampling::NextLogits;

/// A conversation's KV cache and resident ids.
#[derive(Debug, Clone)]
pub struct Session {
    cache: KvCache,
    host: Option<HostKv>,
    resident: Vec<u32>,
    dirty: bool,
    evicted: bool,
    restored: bool,
    device: Device,
    /// Sliding-window state at recent turn boundaries, newest last: whether each was taken at
    /// the end of an answer (else after a user's message).
    snapshots: Vec<(SlidingSnapshot, bool)>,
    /// Forward steps left before an injected failure (tests only).
    fail_in: Option<usize>,
    /// The images among the resident positions, by identity ([`super::images`]).
    images: Vec<Held>,
    /// The model's width (rows of an image's soft tokens).
    hidden: usize,
}

/// Answer-end snapshots kept per session: edits of the last four user messages rewind to one.
const SNAPSHOTS: usize = 4;

/// Snapshots taken after a user's message kept per session: regenerate rewinds to the newest
/// (the one before it serves when a re-prefill under the `strip` thinking policy took another).
const PROMPT_SNAPSHOTS: usize = 2;

impl Session {
    /// An empty session for `model`.
    pub fn new(model: &Gemma) -> Self {
        Self {
            cache: model.new_cache(),
            host: None,
            resident: Vec::new(),
            dirty: false,
            evicted: false,
            restored: false,
            device: model.device().clone(),
            snapshots: Vec::new(),
            fail_in: None,
            images: Vec::new(),
            hidden: model.config().hidden_size,
        }
    }

    /// Positions held; always `resident().len()`.
    pub fn position(&self) -> usize {
        let held = match &self.host {
            Some(h) => h.len(),
            None => self.cache.len(),
        };
        debug_assert_eq!(held, self.resident.len());
        self.resident.len()
    }

    /// Where the KV state lives now.
    pub fn tier(&self) -> Tier {
        match (&self.host, self.evicted) {
            (Some(_), _) => Tier::Host,
            (None, true) => Tier::Cold,
            (None, false) => Tier::Device,
        }
    }

    /// Bytes of KV state on the compute device.
    pub fn device_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Bytes in host memory: the KV state moved there, and the turn-boundary snapshots (which
    /// always live there).
    pub fn host_bytes(&self) -> usize {
        let snapshots: usize = self.snapshots.iter().map(|(s, _)| s.bytes()).sum();
        self.host.as_ref().map_or(0, HostKv::bytes) + snapshots
    }

    /// Moves the KV state to host memory; the resident ids stay.
    pub fn offload(&mut self) {
        if self.host.is_none() && !self.cache.is_empty() {
            self.host = Some(self.cache.to_host());
            self.cache.clear();
        }
    }

    /// Marks an empty session as a conversation restored from disk as text: the next turn
    /// prefills it all (reason `restored`).
    pub fn mark_restored(&mut self) {
        self.evict();
        self.restored = true;
    }

    /// Drops the KV state to free memory; the next turn prefills again (reason `evicted`).
    pub fn evict(&mut self) {
        self.snapshots.clear();
        self.cache.clear();
        self.host = None;
        self.resident.clear();
        self.images.clear();
        self.evicted = true;
    }

    /// A host copy of the KV state and the resident ids, to save to disk (`None` when empty).
    pub fn export(&self) -> Option<(HostKv, &[u32], &[Held])> {
        if self.resident.is_empty() {
            return None;
        }
        let host = match &self.host {
            Some(h) => h.clone(),
            None => self.cache.to_host(),
        };
        Some((host, &self.resident, &self.images))
    }

    /// Takes a saved KV state whose positions hold `resident`, with the pictures `images`
    /// among them, in host memory until the next turn uses it (then it moves to the device
    /// without a prefill).
    pub fn import(&mut self, host: HostKv, resident: Vec<u32>, images: Vec<Held>) -> bool {
        let n = resident.len();
        if host.len() != n || n == 0 || images.iter().any(|(s, _)| s.start >= s.end || s.end > n) {
            return false;
        }
        self.reset();
        self.host = Some(host);
        self.resident = resident;
        self.images = images;
        true
    }

    /// Brings host-held state back to the device (a copy, no prefill).
    fn restore(&mut self) {
        if let Some(host) = self.host.take() {
            self.cache = KvCache::from_host(host, &self.device);
        }
    }

    /// The token ids the cache holds, in order.
    pub fn resident(&self) -> &[u32] {
        &self.resident
    }

    /// Whether an earlier failure forces the next turn to start over.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Forces the next turn to start over (reason `dirty`), e.g. when tokens the user never saw
    /// could not be rewound.
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// Empties the cache and the resident ids and marks the session dirty: after a failed step,
    /// or a failed read of its logits (a GPU reports a failed kernel there), the cache cannot be
    /// trusted.
    pub fn discard(&mut self) {
        self.cache.clear();
        self.resident.clear();
        self.images.clear();
        self.dirty = true;
    }

    /// Makes the forward step after `steps` more successful ones fail as a backend error would,
    /// to test that failures keep the invariant.
    #[doc(hidden)]
    pub fn fail_after(&mut self, steps: usize) {
        self.fail_in = Some(steps);
    }

    /// Drops everything.
    pub fn reset(&mut self) {
        self.snapshots.clear();
        self.cache.clear();
        self.host = None;
        self.resident.clear();
        self.images.clear();
        self.dirty = false;
        self.evicted = false;
        self.restored = false;
    }

    /// Rewinds to `pos` positions; false (and unchanged) when the sliding window cannot.
    pub fn rewind(&mut self, pos: usize) -> bool {
        self.restore();
        if pos > self.resident.len() || !self.cache.truncate(pos) {
            return false;
        }
        self.resident.truncate(pos);
        self.snapshots.retain(|(s, _)| s.position() <= pos);
        true
    }

    /// Remembers the sliding-window state here, after a user's message (`answer_end` false:
    /// a regenerate rewinds here) or at the end of an answer (an edit of the next message rewinds
    /// here), so that neither needs a full prefill. Keeps the newest [`PROMPT_SNAPSHOTS`] of the
    /// first kind and [`SNAPSHOTS`] of the second.
    pub fn snapshot(&mut self, answer_end: bool) {
        self.restore();
        let pos = self.position();
        if self
            .snapshots
            .last()
            .is_some_and(|(s, _)| s.position() == pos)
        {
            return;
        }
        self.snapshots
            .push((self.cache.snapshot_sliding(), answer_end));
        // The newest of each kind are kept.
        let mut left = [PROMPT_SNAPSHOTS, SNAPSHOTS];
        let mut keep: Vec<bool> = self
            .snapshots
            .iter()
            .rev()
            .map(|(_, end)| {
                let n = &mut left[usize::from(*end)];
                let k = *n > 0;
                *n = n.saturating_sub(1);
                k
            })
            .collect();
        keep.reverse();
        let mut k = keep.into_iter();
        self.snapshots.retain(|_| k.next().unwrap_or(false));
    }

    /// Rewinds to `pos`, or where the sliding window cannot go back that far, to the latest
    /// turn-boundary snapshot before it: the position reached (what lies between must be fed
    /// again), or `None` (and unchanged) when neither is possible.
    pub fn rewind_near(&mut self, pos: usize) -> Option<usize> {
        if self.rewind(pos) {
            return Some(pos);
        }
        self.rewind_to_snapshot(pos)
    }

    /// Rewinds to the latest snapshot at or before `pos`; its position, or `None` when none is
    /// usable.
    fn rewind_to_snapshot(&mut self, pos: usize) -> Option<usize> {
        while let Some((snap, end)) = self.snapshots.pop() {
            if snap.position() <= pos && self.cache.restore_sliding(&snap) {
                let at = snap.position();
                self.resident.truncate(at);
                self.snapshots.push((snap, end));
                return Some(at);
            }
        }
        None
    }

    /// Makes the resident ids a prefix of `prompt`, keeping as much as it can, and returns how;
    /// what remains of `prompt` past `position()` must be prefilled (never nothing).
    pub fn prepare(&mut self, prompt: &[u32]) -> Result<Reuse> {
        self.prepare_with(prompt, &[])
    }

    /// [`Session::prepare`] for a prompt with `images`: what is kept stops before the first
    /// image that is not the one the session holds at the same place.
    pub fn prepare_with(&mut self, prompt: &[u32], images: &[MediaSpan]) -> Result<Reuse> {
        if prompt.is_empty() {
            return Err(Error::Invalid("the prompt is empty".into()));
        }
        self.restore();
        if self.dirty {
            self.reset();
            return Ok(Reuse::Dirty);
        }
        if self.evicted {
            let restored = self.restored;
            self.reset();
            return Ok(if restored {
                Reuse::Restored
            } else {
                Reuse::Evicted
            });
        }
        if self.resident.is_empty() {
            return Ok(Reuse::New);
        }
        let common = self
            .resident
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        let held = self.resident.len();
        self.images.retain(|(span, _)| span.end <= held);
        let common = shared(&self.images, images, self.hidden, common);
        if common == self.resident.len() && common < prompt.len() {
            return Ok(Reuse::ExactPrefix);
        }
        // Equal, or diverging: keep at most one token short of the prompt so that the last one
        // is prefilled again and gives fresh logits.
        let keep = common.min(prompt.len() - 1);
        let reason = if common == prompt.len() && common == self.resident.len() {
            Reuse::Equal
        } else {
            Reuse::Rewind
        };
        if self.rewind(keep) || self.rewind_to_snapshot(keep).is_some() {
            Ok(reason)
        } else {
            self.reset();
            Ok(Reuse::Mismatch)
        }
    }

    /// Prefills `ids` at the current position in chunks of `chunk` and returns the last
    /// position's logits. On failure the session is emptied and marked dirty. (A turn prefills
    /// through [`super::turn::Turn`], a chunk per step; this is for whole histories.)
    pub fn prefill(&mut self, model: &Gemma, ids: &[u32], chunk: usize) -> Result<NextLogits> {
        self.prefill_with(model, ids, &[], chunk)
    }

    /// [`Session::prefill`] with the conversation's `images`, never split across steps.
    pub fn prefill_with(
        &mut self,
        model: &Gemma,
        ids: &[u32],
        images: &[MediaSpan],
        chunk: usize,
    ) -> Result<NextLogits> {
        if ids.is_empty() {
            return Err(Error::Invalid("prefill needs at least one token".into()));
        }
        let (start, mut done) = (self.position(), 0);
        let mut last = None;
        while done < ids.len() {
            let (from, to) = (
                start + done,
                (start + done + chunk.max(1)).min(start + ids.len()),
            );
            let to = chunk_end(images, self.hidden, from, to);
            let mode = if to == start + ids.len() {
                Logits::Last
            } else {
                Logits::None
            };
            last = self.feed_with(model, &ids[done..to - start], images, mode)?;
            done = to - start;
        }
        let last = last.ok_or_else(|| Error::Backend("the last chunk gave no logits".into()))?;
        Ok(NextLogits::last_of(last))
    }

    /// Feeds `ids` at the current position in one forward step, keeping the invariant whatever
    /// happens: on success they are resident; on failure the session is emptied and marked
    /// dirty. Returns the logits `mode` asks for.
    pub fn feed(&mut self, model: &Gemma, ids: &[u32], mode: Logits) -> Result<Option<Tensor<2>>> {
        self.feed_with(model, ids, &[], mode)
    }

    /// [`Session::feed`] with the `images` of the conversation (prompt positions): those lying
    /// wholly within this step replace their placeholders' embeddings and become resident by
    /// identity.
    pub fn feed_with(
        &mut self,
        model: &Gemma,
        ids: &[u32],
        images: &[MediaSpan],
        mode: Logits,
    ) -> Result<Option<Tensor<2>>> {
        if ids.is_empty() {
            return Err(Error::Invalid(
                "a forward step needs at least one token".into(),
            ));
        }
        self.restore();
        let pos = self.position();
        let injected = match self.fail_in {
            Some(0) => {
                self.fail_in = None;
                true
            }
            Some(n) => {
                self.fail_in = Some(n - 1);
                false
            }
            None => false,
        };
        let soft = softs(images, self.hidden, pos, pos + ids.len());
        let result = if injected {
            Err(Error::Backend("injected failure".into()))
        } else {
            model.forward_with(ids, &soft, &mut self.cache, pos, mode)
        };
        match result {
            Ok(out) => {
                self.resident.extend_from_slice(ids);
                self.images.retain(|(span, _)| span.end <= pos);
                let (from, to) = (pos, pos + ids.len());
                self.images.extend(images.iter().filter_map(|i| {
                    let span = i.span(self.hidden);
                    (span.start >= from && span.end <= to).then_some((span, i.key))
                }));
                Ok(out)
            }
            Err(e) => {
                self.discard();
                Err(e)
            }
        }
    }
}

/// How many sessions fit in `budget` bytes of KV state: the estimated bytes of one session at
/// `context` positions with `elem_bytes` per value ([`Gemma::kv_value_bytes`] for the model's
/// own cache), and the count (the weights are shared and not counted).
pub fn serving_capacity(
    model: &Gemma,
    elem_bytes: f64,
    context: usize,
    budget: usize,
) -> (usize, usize) {
    let per = KvCache::estimate_bytes(model.config(), elem_bytes, context).max(1);
    (per, budget / per)
}
