//! The KV cache one conversation owns: per layer, the post-norm, post-RoPE keys and the values of
//! the positions it still needs. The model reads and appends to it; it never owns one.
//!
//! Full layers keep every position. Sliding layers keep only the last `window − 1` positions
//! after each forward, so their memory is bounded; their masks use logical positions.

use burn::tensor::Tensor;

use super::config::{AttnKind, ModelConfig};

/// Keys and values of one layer.
#[derive(Debug, Clone)]
pub struct LayerKv {
    /// `[kv_heads, len, head_dim]`.
    pub k: Tensor<3>,
    /// `[kv_heads, len, head_dim]`.
    pub v: Tensor<3>,
    /// Logical position of the first kept entry.
    pub start: usize,
}

impl LayerKv {
    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.k.dims()[1]
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            let keep = len - kv.start;
            let [h, _, d] = kv.k.dims();
            kv.k = kv.k.clone().slice([0..h, 0..keep, 0..d]);
            kv.v = kv.v.clone().slice([0..h, 0..keep, 0..d]);
        }
        self.len = len;
        true
    }

    /// Appends one chunk's keys and values to `layer` and returns the whole view.
    pub(crate) fn append(&mut self, layer: usize, k: Tensor<3>, v: Tensor<3>) -> LayerKv {
        let slot = &mut self.layers[layer];
        let kv = match slot.take() {
            None => LayerKv {
                k,
                v,
                start: self.len,
            },
            Some(old) => LayerKv {
                k: Tensor::cat(vec![old.k, k], 1),
                v: Tensor::cat(vec![old.v, v], 1),
                start: old.start,
            },
        };
        *slot = Some(kv.clone());
        kv
    }

    /// The current view of `layer` (used by KV-shared layers to read their donor).
    pub(crate) fn view(&self, layer: usize) -> Option<&LayerKv> {
        self.layers[layer].as_ref()
    }

    /// Ends a forward of `added` positions: advances the length and drops sliding entries that
    /// no later query can see.
    pub(crate) fn finish(&mut self, added: usize) {
        self.len += added;
        let keep = self.window.saturating_sub(1);
        for (slot, kind) in self.layers.iter_mut().zip(&self.kinds) {
            if *kind != AttnKind::Sliding {
                continue;
            }
            if let Some(kv) = slot
                && kv.len() > keep
            {
                let drop = kv.len() - keep;
                let [h, n, d] = kv.k.dims();
                kv.k = kv.k.clone().slice([0..h, drop..n, 0..d]);
                kv.v = kv.v.clone().slice([0..h, drop..n, 0..d]);
                kv.start += drop;
            }
        }
    }
}
