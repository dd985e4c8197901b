//! One conversation's warm state: its KV cache and its resident token ids, always of the same
//! length. A new turn reuses the longest prefix the session already holds and prefills only the
//! rest; it re-prefills the history only when it must, and says why ([`Reuse`]).
//!
//! The contract is `shared/docs/sessions.md`: `resident.len() == position()` after every call,
//! failed and stopped ones included; never an empty prefill; a failure leaves the session empty
//! and marked, never half-updated.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use burn::tensor::Device;

use crate::error::{Error, Result};
use crate::model::kv_cache::{HostKv, SlidingSnapshot};
use crate::model::{Gemma, KvCache, Logits};
use crate::sampling::{NextLogits, Sampler, SamplingParams};

/// Why a turn prefilled what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Nothing was resident: full prefill.
    New,
    /// The prompt extends the resident ids: only the suffix is prefilled.
    ExactPrefix,
    /// The prompt diverges from the resident ids: rewound to the longest common prefix.
    Rewind,
    /// The prompt equals the resident ids: the last token is prefilled again for fresh logits.
    Equal,
    /// The session was marked dirty by an earlier failure: full prefill.
    Dirty,
    /// The session had been dropped to text to free memory: full prefill.
    Evicted,
    /// The tab came back from disk without its KV state: full prefill.
    Restored,
    /// The prompt diverges where the sliding window can no longer rewind: full prefill.
    Mismatch,
}

impl Reuse {
    /// The name shown to users and in stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Reuse::New => "new",
            Reuse::ExactPrefix => "exact_prefix",
            Reuse::Rewind => "rewind",
            Reuse::Equal => "equal",
            Reuse::Dirty => "dirty",
            Reuse::Evicted => "evicted",
            Reuse::Restored => "restored",
            Reuse::Mismatch => "mismatch",
        }
    }
}

/// What a turn cost.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStats {
    /// How the resident ids were reused.
    pub reuse: Reuse,
    /// Prompt tokens that were already resident.
    pub reused_tokens: usize,
    /// Prompt tokens that were prefilled.
    pub prefilled_tokens: usize,
    /// Prefill speed.
    pub prefill_tok_s: f64,
    /// Decode speed.
    pub decode_tok_s: f64,
    /// Seconds from the start of the turn to the first sampled token.
    pub ttft_s: f64,
    /// Tokens generated (the stop id excluded).
    pub generated_tokens: usize,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// A stop id ended it (not resident: the next turn decides how the turn is closed).
    Stop(u32),
    /// The token budget ran out.
    Length,
    /// The caller stopped it.
    Stopped,
    /// A stop string appeared in the text; the tokens that made it are not resident.
    StopString,
    /// The context limit was reached: the answer is cut there, visibly.
    ContextFull,
}

impl TurnEnd {
    /// A short description for users.
    pub fn describe(self) -> &'static str {
        match self {
            TurnEnd::Stop(_) => "done",
            TurnEnd::Length => "token limit reached",
            TurnEnd::Stopped => "stopped",
            TurnEnd::StopString => "stop string",
            TurnEnd::ContextFull => "context full",
        }
    }
}

/// Where a session's KV state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// On the compute device, ready to run.
    Device,
    /// Copied to host memory; restored before its next turn without any prefill.
    Host,
    /// Dropped to text to free memory; the next turn prefills the history again.
    Cold,
}

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
    /// Sliding-window state at recent user-turn boundaries, newest last.
    snapshots: Vec<SlidingSnapshot>,
    /// Forward steps left before an injected failure (tests only).
    fail_in: Option<usize>,
}

/// Turn-boundary snapshots kept per session.
const SNAPSHOTS: usize = 4;

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

    /// Bytes of KV state in host memory.
    pub fn host_bytes(&self) -> usize {
        self.host.as_ref().map_or(0, HostKv::bytes)
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
        self.evicted = true;
    }

    /// A host copy of the KV state and the resident ids, to save to disk (`None` when empty).
    pub fn export(&self) -> Option<(HostKv, &[u32])> {
        if self.resident.is_empty() {
            return None;
        }
        let host = match &self.host {
            Some(h) => h.clone(),
            None => self.cache.to_host(),
        };
        Some((host, &self.resident))
    }

    /// Takes a saved KV state whose positions hold `resident`, in host memory until the next
    /// turn uses it (then it moves to the device without a prefill).
    pub fn import(&mut self, host: HostKv, resident: Vec<u32>) -> bool {
        if host.len() != resident.len() || resident.is_empty() {
            return false;
        }
        self.reset();
        self.host = Some(host);
        self.resident = resident;
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
        self.snapshots.retain(|s| s.position() <= pos);
        true
    }

    /// Remembers the sliding-window state here (a user-turn boundary), so that a later
    /// regenerate or edit can rewind to it without a full prefill.
    pub fn snapshot(&mut self) {
        self.restore();
        let pos = self.position();
        if self.snapshots.last().is_some_and(|s| s.position() == pos) {
            return;
        }
        self.snapshots.push(self.cache.snapshot_sliding());
        if self.snapshots.len() > SNAPSHOTS {
            self.snapshots.remove(0);
        }
    }

    /// Rewinds to the latest snapshot at or before `pos`; its position, or `None` when none is
    /// usable.
    fn rewind_to_snapshot(&mut self, pos: usize) -> Option<usize> {
        while let Some(snap) = self.snapshots.pop() {
            if snap.position() <= pos && self.cache.restore_sliding(&snap) {
                let at = snap.position();
                self.resident.truncate(at);
                self.snapshots.push(snap);
                return Some(at);
            }
        }
        None
    }

    /// Makes the resident ids a prefix of `prompt`, keeping as much as it can, and returns how;
    /// what remains of `prompt` past `position()` must be prefilled (never nothing).
    pub fn prepare(&mut self, prompt: &[u32]) -> Result<Reuse> {
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

    /// Prefills `ids` at the current position in chunks, checking `stop` between chunks.
    /// Returns the last position's logits (where the model computed them), or `None` when
    /// stopped. On failure the session is emptied and marked dirty.
    pub fn prefill(
        &mut self,
        model: &Gemma,
        ids: &[u32],
        chunk: usize,
        stop: &AtomicBool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Option<NextLogits>> {
        if ids.is_empty() {
            return Err(Error::Invalid("prefill needs at least one token".into()));
        }
        self.restore();
        let chunks: Vec<&[u32]> = ids.chunks(chunk.max(1)).collect();
        let mut done = 0;
        for (i, part) in chunks.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let last = i + 1 == chunks.len();
            let mode = if last { Logits::Last } else { Logits::None };
            let out = self.step(model, part, mode)?;
            done += part.len();
            progress(done, ids.len());
            if last {
                return Ok(out);
            }
        }
        Ok(None)
    }

    /// Feeds one chunk, keeping the invariant whatever happens.
    fn step(&mut self, model: &Gemma, ids: &[u32], mode: Logits) -> Result<Option<NextLogits>> {
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
        let result = if injected {
            Err(Error::Backend("injected failure".into()))
        } else {
            model
                .forward(ids, &mut self.cache, pos, mode)
                .map(|out| out.map(NextLogits::last_of))
        };
        match result {
            Ok(out) => {
                self.resident.extend_from_slice(ids);
                Ok(out)
            }
            Err(e) => {
                self.discard();
                Err(e)
            }
        }
    }

    /// Runs one turn: reuses what it can of `prompt` (the whole conversation in ids), prefills
    /// the rest, then samples up to `max_new_tokens`. Every sampled token but a stop id becomes
    /// resident. `on_token` sees each kept token; `stop` ends the turn within one chunk or step.
    #[allow(clippy::too_many_arguments)]
    pub fn run_turn(
        &mut self,
        model: &Gemma,
        prompt: &[u32],
        sampling: &SamplingParams,
        max_new_tokens: usize,
        stop_ids: &[u32],
        chunk: usize,
        stop: &AtomicBool,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<(TurnEnd, TurnStats)> {
        let limit = model.config().max_position_embeddings;
        let needed = prompt.len() + max_new_tokens;
        if needed > limit {
            // Refused before anything changes: the session stays as it was.
            return Err(Error::ContextLengthExceeded { needed, limit });
        }
        let start = Instant::now();
        let reuse = self.prepare(prompt)?;
        let reused = self.position();
        let todo = &prompt[reused..];
        // The snapshot goes one token before the end of the prompt, so that a regenerate rewinds
        // there and prefills just that token for fresh logits.
        let (head, last) = todo.split_at(todo.len() - 1);
        let mut logits = None;
        if !head.is_empty() {
            self.prefill(model, head, chunk, stop, &mut |_, _| {})?;
        }
        if self.position() == prompt.len() - 1 {
            self.snapshot();
            logits = self.prefill(model, last, chunk, stop, &mut |_, _| {})?;
        }
        let prefill_s = start.elapsed().as_secs_f64();
        let mut stats = TurnStats {
            reuse,
            reused_tokens: reused,
            prefilled_tokens: todo.len(),
            prefill_tok_s: todo.len() as f64 / prefill_s.max(1e-9),
            decode_tok_s: 0.0,
            ttft_s: 0.0,
            generated_tokens: 0,
        };
        let Some(mut logits) = logits else {
            return Ok((TurnEnd::Stopped, stats));
        };
        let mut sampler = Sampler::new(sampling.clone());
        let decode_start = Instant::now();
        let mut end = TurnEnd::Length;
        for n in 0..max_new_tokens {
            let id = sampler.pick(logits).inspect_err(|_| self.discard())?;
            if n == 0 {
                stats.ttft_s = start.elapsed().as_secs_f64();
            }
            if stop_ids.contains(&id) {
                end = TurnEnd::Stop(id);
                break;
            }
            on_token(id);
            stats.generated_tokens += 1;
            let out = self.step(model, &[id], Logits::Last)?;
            logits =
                out.ok_or_else(|| Error::Backend("a decode step returned no logits".into()))?;
            if stop.load(Ordering::Relaxed) {
                end = TurnEnd::Stopped;
                break;
            }
        }
        stats.decode_tok_s =
            stats.generated_tokens as f64 / decode_start.elapsed().as_secs_f64().max(1e-9);
        Ok((end, stats))
    }
}

/// How many sessions fit in `budget` bytes of KV state: the estimated bytes of one session at
/// `context` positions with `elem_bytes` per value, and the count (the weights are shared and
/// not counted).
pub fn serving_capacity(
    model: &Gemma,
    elem_bytes: usize,
    context: usize,
    budget: usize,
) -> (usize, usize) {
    let per = KvCache::estimate_bytes(model.config(), elem_bytes, context).max(1);
    (per, budget / per)
}
