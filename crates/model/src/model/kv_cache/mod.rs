//! The KV cache one conversation owns: per layer, the post-norm, post-RoPE keys and the values of
//! the positions it still needs. The model reads and appends to it; it never owns one.
//!
//! Each layer keeps a buffer with spare capacity and appends in place (growing by a quarter when
//! full), so a decode step costs one small write, not a copy of the history. Full layers keep
//! every position.
//! Sliding layers drop positions no later query can see, but only once twice the window has
//! piled up, so trimming is amortised and short rewinds stay possible; their masks use logical
//! positions, never buffer slots.
//! On the CPU backend in f32 the layers live on the host in the cache's [`KvDtype`] (f16 by
//! default, as llama.cpp), converted once on append and widened to f32 as attention reads them.

mod dtype;
mod host_buf;
mod layer;
#[cfg(test)]
mod tests;

pub use self::dtype::{BlockQ8, KvDtype, KvLayout, Q8_BLOCK, Q8_BYTES};
pub use self::host_buf::Rows;
pub use self::layer::{HostView, LayerKv};

use burn::tensor::{Device, Tensor};

use super::config::{AttnKind, ModelConfig};

/// A whole model's cache. `len()` is the number of positions processed so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
    kinds: Vec<AttnKind>,
    window: usize,
    len: usize,
    /// The type of host layers; `None` where the layers are tensors on the compute device.
    host: Option<KvDtype>,
}

impl KvCache {
    /// An empty cache shaped for `cfg`, whose layers live on the host in `host` (a model on the
    /// CPU backend in f32) or, for `None`, as tensors on the compute device.
    pub fn new(cfg: &ModelConfig, host: Option<KvDtype>) -> Self {
        Self {
            layers: vec![None; cfg.num_layers()],
            kinds: cfg.layers.iter().map(|l| l.kind).collect(),
            window: cfg.sliding_window,
            len: 0,
            host,
        }
    }

    /// The type host layers keep; `None` for a device cache.
    pub fn host_dtype(&self) -> Option<KvDtype> {
        self.host
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
            kv.truncate(len - kv.start);
        }
        self.len = len;
        true
    }

    /// Appends one chunk's keys and values (`[kv_heads, T, head_dim]`) to `layer`.
    pub(crate) fn append(&mut self, layer: usize, k: Tensor<3>, v: Tensor<3>) {
        let (start, host) = (self.len, self.host);
        self.layers[layer]
            .get_or_insert_with(|| LayerKv::empty_like(&k, start, host))
            .append(k, v);
    }

    /// Appends position-major `[T, heads, dim]` keys and values to `layer` on the host (the
    /// fused host step).
    pub(crate) fn append_host(
        &mut self,
        layer: usize,
        (heads, dim): (usize, usize),
        device: &Device,
        k: &[f32],
        v: &[f32],
    ) {
        let (start, t) = (self.len, self.host.unwrap_or(KvDtype::F32));
        self.layers[layer]
            .get_or_insert_with(|| LayerKv::empty_host(heads, dim, device, start, t))
            .append_host(k, v);
    }

    /// The current state of `layer` (used by KV-shared layers to read their donor).
    pub(crate) fn layer(&self, layer: usize) -> Option<&LayerKv> {
        self.layers[layer].as_ref()
    }

    /// Ends a forward of `added` positions: advances the length and, once a sliding layer holds
    /// twice its window, drops the positions no later query can see.
    pub(crate) fn finish(&mut self, added: usize) {
        self.len += added;
        // Past the window, a few positions more: a speculative check's rejected ids are
        // rewound without a re-prefill.
        let keep = self.window.saturating_sub(1) + REWIND_SLACK;
        for (slot, kind) in self.layers.iter_mut().zip(&self.kinds) {
            if *kind != AttnKind::Sliding {
                continue;
            }
            if let Some(kv) = slot
                && kv.len() > 2 * keep.max(1)
            {
                kv.keep_last(keep);
            }
        }
    }
}

/// Positions a sliding layer keeps past its window when it trims: enough to rewind the longest
/// speculative draft (16 ids) a check did not keep.
pub const REWIND_SLACK: usize = 16;

/// A cache moved off the compute device into host memory (its live positions only).
#[derive(Debug, Clone)]
pub struct HostKv {
    layers: Vec<Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>>,
    kinds: Vec<AttnKind>,
    window: usize,
    len: usize,
    host: Option<KvDtype>,
}

impl HostKv {
    /// Per layer: keys `[heads, len, dim]`, values, and the first position they hold (`None`
    /// for layers that keep no cache of their own).
    pub fn layers(&self) -> &[Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>] {
        &self.layers
    }

    /// The type of the cache's host layers, `None` for a device cache ([`KvCache::host_dtype`]).
    pub fn host_dtype(&self) -> Option<KvDtype> {
        self.host
    }

    /// Rebuilds a host copy for `cfg` from its layers and length (the inverse of
    /// [`HostKv::layers`]) for a cache of host type `host` (`None`: device tensors); `None`
    /// when they do not fit `cfg`'s layout, or host layers' data is not of that type
    /// ([`KvDtype::stored`]).
    pub fn from_layers(
        cfg: &ModelConfig,
        layers: Vec<Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>>,
        len: usize,
        host: Option<KvDtype>,
    ) -> Option<Self> {
        if layers.len() != cfg.num_layers() {
            return None;
        }
        let kinds: Vec<AttnKind> = cfg.layers.iter().map(|l| l.kind).collect();
        for ((l, kind), layer) in layers.iter().zip(&kinds).zip(&cfg.layers) {
            // A layer with its own KV must be there (with positions); one sharing a donor's
            // must not.
            let Some((k, v, start)) = l else {
                if layer.kv_donor.is_none() && len > 0 {
                    return None;
                }
                continue;
            };
            if layer.kv_donor.is_some() {
                return None;
            }
            let (ks, vs) = (k.shape().as_slice(), v.shape().as_slice());
            let (dtype, width) = match host {
                Some(t) => t.stored(layer.head_dim),
                None => (k.dtype(), layer.head_dim),
            };
            let fits = ks.len() == 3
                && vs.len() == 3
                && vs == ks
                && (k.dtype(), v.dtype()) == (dtype, dtype)
                && ks[0] == layer.kv_heads
                && ks[2] == width
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
            host,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        host_bytes(&self.layers)
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
    /// `elem_bytes` per value (a fraction for q8_0, [`KvDtype::value_bytes`]): every non-shared
    /// layer, sliding ones capped at twice the window and the rewind slack (their trim point).
    pub fn estimate_bytes(cfg: &ModelConfig, elem_bytes: f64, context: usize) -> usize {
        cfg.layers
            .iter()
            .filter(|l| l.kv_donor.is_none())
            .map(|l| {
                let positions = match l.kind {
                    AttnKind::Full => context,
                    AttnKind::Sliding => context.min(2 * (cfg.sliding_window + REWIND_SLACK)),
                };
                (2 * l.kv_heads * l.head_dim * positions) as f64 * elem_bytes
            })
            .sum::<f64>()
            .ceil() as usize
    }

    /// Bytes of live keys and values.
    pub fn bytes(&self) -> usize {
        self.layers.iter().flatten().map(LayerKv::bytes).sum()
    }

    /// Copies the live positions to host memory.
    pub fn to_host(&self) -> HostKv {
        HostKv {
            layers: self
                .layers
                .iter()
                .map(|l| {
                    l.as_ref().map(|kv| {
                        let (k, v) = kv.data(0..kv.len());
                        (k, v, kv.start)
                    })
                })
                .collect(),
            kinds: self.kinds.clone(),
            window: self.window,
            len: self.len,
            host: self.host,
        }
    }

    /// Rebuilds a cache on `device` from a host copy.
    pub fn from_host(host: HostKv, device: &Device) -> Self {
        let t = host.host;
        Self {
            layers: host
                .layers
                .into_iter()
                .map(|l| l.map(|(k, v, start)| LayerKv::from_data(k, v, start, device, t)))
                .collect(),
            kinds: host.kinds,
            window: host.window,
            len: host.len,
            host: t,
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

    /// Bytes it holds (in host memory).
    pub fn bytes(&self) -> usize {
        host_bytes(&self.layers)
    }
}

/// Bytes of layers' keys and values copied to host memory.
fn host_bytes(
    layers: &[Option<(burn::tensor::TensorData, burn::tensor::TensorData, usize)>],
) -> usize {
    layers
        .iter()
        .flatten()
        .map(|(k, v, _)| k.bytes().len() + v.bytes().len())
        .sum()
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
                    let n = kv.len().min(keep);
                    let (k, v) = kv.data(kv.len() - n..kv.len());
                    Some((k, v, kv.start + kv.len() - n))
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
            Some(kv) => kv.device(),
            None => return snap.pos == 0,
        };
        for ((slot, kind), saved) in self.layers.iter_mut().zip(&self.kinds).zip(&snap.layers) {
            match (slot.as_mut(), kind, saved) {
                (Some(kv), AttnKind::Sliding, Some((k, v, start))) => {
                    *kv = LayerKv::from_data(k.clone(), v.clone(), *start, &device, self.host);
                }
                (Some(kv), AttnKind::Full, _) => kv.truncate(snap.pos - kv.start),
                (Some(_), AttnKind::Sliding, None) | (None, _, _) => {}
            }
        }
        self.len = snap.pos;
        true
    }
}
