//! The KV cache one conversation owns: per layer, the post-norm, post-RoPE keys and the values of
//! the positions it still needs. The model reads and appends to it; it never owns one.
//!
//! Each layer keeps a buffer with spare capacity and appends in place (growing by a quarter when
//! full), so a decode step costs one small write, not a copy of the history. Full layers keep
//! every position.
//! Sliding layers drop positions no later query can see, but only once twice the window has
//! piled up, so trimming is amortised and short rewinds stay possible; their masks use logical
//! positions, never buffer slots.

use burn::tensor::Tensor;

use super::config::{AttnKind, ModelConfig};

/// Keys and values of one layer.
#[derive(Debug, Clone)]
pub struct LayerKv {
    /// `[kv_heads, capacity, head_dim]`; the first `len` positions are live.
    k: Tensor<3>,
    /// Same layout as `k`.
    v: Tensor<3>,
    /// Live positions.
    len: usize,
    /// Logical position of the first live entry.
    pub start: usize,
}

impl LayerKv {
    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The live keys and values, `[kv_heads, len, head_dim]` each.
    pub fn view(&self) -> (Tensor<3>, Tensor<3>) {
        let [h, _, d] = self.k.dims();
        (
            self.k.clone().slice([0..h, 0..self.len, 0..d]),
            self.v.clone().slice([0..h, 0..self.len, 0..d]),
        )
    }

    fn append(&mut self, k: Tensor<3>, v: Tensor<3>) {
        let [h, t, d] = k.dims();
        let cap = self.k.dims()[1];
        if self.len + t > cap {
            // A quarter to spare: amortised appends without doubling a long history's memory.
            let need = self.len + t;
            let new_cap = (need + need / 4).max(16);
            let grow = |buf: &Tensor<3>| {
                let spare =
                    Tensor::<3>::zeros([h, new_cap - self.len, d], &buf.device()).cast(buf.dtype());
                Tensor::cat(vec![buf.clone().slice([0..h, 0..self.len, 0..d]), spare], 1)
            };
            self.k = grow(&self.k);
            self.v = grow(&self.v);
        }
        let range = [0..h, self.len..self.len + t, 0..d];
        self.k.inplace(|buf| buf.slice_assign(range.clone(), k));
        self.v.inplace(|buf| buf.slice_assign(range, v));
        self.len += t;
    }

    /// Keeps only the last `keep` positions (a copy into a fresh buffer).
    fn keep_last(&mut self, keep: usize) {
        let drop = self.len - keep;
        let [h, _, d] = self.k.dims();
        self.k = self.k.clone().slice([0..h, drop..self.len, 0..d]);
        self.v = self.v.clone().slice([0..h, drop..self.len, 0..d]);
        self.len = keep;
        self.start += drop;
    }
}

/// A whole model's cache. `len()` is the number of positions processed so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
    kinds: Vec<AttnKind>,
    window: usize,
    len: usize,
}

impl KvCache {
    /// An empty cache shaped for `cfg`.
    pub fn new(cfg: &ModelConfig) -> Self {
        Self {
            layers: vec![None; cfg.num_layers()],
            kinds: cfg.layers.iter().map(|l| l.kind).collect(),
            window: cfg.sliding_window,
            len: 0,
        }
    }

    /// Positions processed so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been processed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|l| *l = None);
        self.len = 0;
    }

    /// Rewinds to `len` positions. Returns false (and changes nothing) when a sliding layer no
    /// longer holds the window that position needs; the caller must then re-prefill.
    pub fn truncate(&mut self, len: usize) -> bool {
        if len >= self.len {
            return len == self.len;
        }
        if len == 0 {
            self.clear();
            return true;
        }
        let need = self.window.saturating_sub(1);
        let ok = self
            .layers
            .iter()
            .zip(&self.kinds)
            .all(|(l, kind)| match l {
                None => true,
                Some(kv) => *kind == AttnKind::Full || kv.start <= len.saturating_sub(need),
            });
        if !ok {
            return false;
        }
        for kv in self.layers.iter_mut().flatten() {
            kv.len = len - kv.start;
        }
        self.len = len;
        true
    }

    /// Appends one chunk's keys and values to `layer` and returns its live view.
    pub(crate) fn append(&mut self, layer: usize, k: Tensor<3>, v: Tensor<3>) -> LayerKv {
        let start = self.len;
        let slot = self.layers[layer].get_or_insert_with(|| LayerKv {
            k: k.zeros_like().slice([0..k.dims()[0], 0..0, 0..k.dims()[2]]),
            v: v.zeros_like().slice([0..v.dims()[0], 0..0, 0..v.dims()[2]]),
            len: 0,
            start,
        });
        slot.append(k, v);
        slot.clone()
    }

    /// The current state of `layer` (used by KV-shared layers to read their donor).
    pub(crate) fn layer(&self, layer: usize) -> Option<&LayerKv> {
        self.layers[layer].as_ref()
    }

    /// Ends a forward of `added` positions: advances the length and, once a sliding layer holds
    /// twice its window, drops the positions no later query can see.
    pub(crate) fn finish(&mut self, added: usize) {
        self.len += added;
        let keep = self.window.saturating_sub(1);
        for (slot, kind) in self.layers.iter_mut().zip(&self.kinds) {
            if *kind != AttnKind::Sliding {
                continue;
            }
            if let Some(kv) = slot
                && kv.len > 2 * keep.max(1)
            {
                kv.keep_last(keep);
            }
        }
    }
}

/// A cache moved off the compute device into host memory (its live positions only).
#[derive(Debug, Clone)]
pub struct HostKv {
    layers: Vec<Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>>,
    kinds: Vec<AttnKind>,
    window: usize,
    len: usize,
}

impl HostKv {
    /// Per layer: keys `[heads, len, dim]`, values, and the first position they hold (`None`
    /// for layers that keep no cache of their own).
    pub fn layers(&self) -> &[Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>] {
        &self.layers
    }

    /// Rebuilds a host copy for `cfg` from its layers and length (the inverse of
    /// [`HostKv::layers`]); `None` when they do not fit `cfg`'s layout.
    pub fn from_layers(
        cfg: &ModelConfig,
        layers: Vec<Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>>,
        len: usize,
    ) -> Option<Self> {
        if layers.len() != cfg.num_layers() {
            return None;
        }
        let kinds: Vec<AttnKind> = cfg.layers.iter().map(|l| l.kind).collect();
        for ((l, kind), layer) in layers.iter().zip(&kinds).zip(&cfg.layers) {
            let Some((k, v, start)) = l else { continue };
            let (ks, vs) = (k.shape().as_slice(), v.shape().as_slice());
            let fits = ks.len() == 3
                && vs.len() == 3
                && vs[..2] == ks[..2]
                && ks[0] == layer.kv_heads
                && ks[2] == layer.head_dim
                && start + ks[1] == len
                && (*kind == AttnKind::Sliding || *start == 0);
            if !fits {
                return None;
            }
        }
        Some(Self {
            layers,
            kinds,
            window: cfg.sliding_window,
            len,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v, _)| k.bytes().len() + v.bytes().len())
            .sum()
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl KvCache {
    /// Estimated bytes of one session's keys and values at `context` positions, with
    /// `elem_bytes` per value: every non-shared layer, sliding ones capped at twice the window.
    pub fn estimate_bytes(cfg: &ModelConfig, elem_bytes: usize, context: usize) -> usize {
        cfg.layers
            .iter()
            .filter(|l| l.kv_donor.is_none())
            .map(|l| {
                let positions = match l.kind {
                    AttnKind::Full => context,
                    AttnKind::Sliding => context.min(2 * cfg.sliding_window),
                };
                2 * l.kv_heads * l.head_dim * elem_bytes * positions
            })
            .sum()
    }

    /// Bytes of live keys and values.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|kv| {
                let [h, _, d] = kv.k.dims();
                2 * h * kv.len * d * kv.k.dtype().size()
            })
            .sum()
    }

    /// Copies the live positions to host memory.
    pub fn to_host(&self) -> HostKv {
        HostKv {
            layers: self
                .layers
                .iter()
                .map(|l| {
                    l.as_ref().map(|kv| {
                        let (k, v) = kv.view();
                        (k.into_data(), v.into_data(), kv.start)
                    })
                })
                .collect(),
            kinds: self.kinds.clone(),
            window: self.window,
            len: self.len,
        }
    }

    /// Rebuilds a cache on `device` from a host copy.
    pub fn from_host(host: HostKv, device: &burn::tensor::Device) -> Self {
        Self {
            layers: host
                .layers
                .into_iter()
                .map(|l| {
                    l.map(|(k, v, start)| {
                        let (kd, vd) = (k.dtype(), v.dtype());
                        let k = Tensor::<3>::from_data(k, (device, kd));
                        let v = Tensor::<3>::from_data(v, (device, vd));
                        let len = k.dims()[1];
                        LayerKv { k, v, len, start }
                    })
                })
                .collect(),
            kinds: host.kinds,
            window: host.window,
            len: host.len,
        }
    }
}

/// The sliding layers' state at one position: what a rewind to that position needs, since a
/// trimmed sliding buffer cannot be truncated back past its window. Small: window × sliding
/// layers.
#[derive(Debug, Clone)]
pub struct SlidingSnapshot {
    pos: usize,
    layers: Vec<Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>>,
}

impl SlidingSnapshot {
    /// The position it restores to.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl KvCache {
    /// Copies the last `window − 1` positions of every sliding layer (to host memory).
    pub fn snapshot_sliding(&self) -> SlidingSnapshot {
        let keep = self.window.saturating_sub(1);
        let layers = self
            .layers
            .iter()
            .zip(&self.kinds)
            .map(|(l, kind)| match (l, kind) {
                (Some(kv), AttnKind::Sliding) => {
                    let n = kv.len.min(keep);
                    let [h, _, d] = kv.k.dims();
                    let range = [0..h, kv.len - n..kv.len, 0..d];
                    let k = kv.k.clone().slice(range.clone()).into_data();
                    let v = kv.v.clone().slice(range).into_data();
                    Some((k, v, kv.start + kv.len - n))
                }
                _ => None,
            })
            .collect();
        SlidingSnapshot {
            pos: self.len,
            layers,
        }
    }

    /// Rewinds to the snapshot's position: full layers are truncated, sliding layers replaced by
    /// the snapshot. False (and unchanged) when the cache no longer holds that position.
    pub fn restore_sliding(&mut self, snap: &SlidingSnapshot) -> bool {
        if snap.pos > self.len || snap.layers.len() != self.layers.len() {
            return false;
        }
        let device = match self.layers.iter().flatten().next() {
            Some(kv) => kv.k.device(),
            None => return snap.pos == 0,
        };
        for ((slot, kind), saved) in self.layers.iter_mut().zip(&self.kinds).zip(&snap.layers) {
            match (slot.as_mut(), kind, saved) {
                (Some(kv), AttnKind::Sliding, Some((k, v, start))) => {
                    let (kd, vd) = (k.dtype(), v.dtype());
                    kv.k = Tensor::<3>::from_data(k.clone(), (&device, kd));
                    kv.v = Tensor::<3>::from_data(v.clone(), (&device, vd));
                    kv.len = kv.k.dims()[1];
                    kv.start = *start;
                }
                (Some(kv), AttnKind::Full, _) => kv.len = snap.pos - kv.start,
                (Some(_), AttnKind::Sliding, None) | (None, _, _) => {}
            }
        }
        self.len = snap.pos;
        true
    }
}
