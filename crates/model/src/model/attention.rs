//! Grouped-query self-attention of one decoder layer: q/k/v projections, per-head norms, RoPE,
//! the cache append (or a read of the donor's cache on KV-shared layers), and the masked softmax.

use std::cell::RefCell;

use burn::tensor::{DType, Device, Tensor, TensorData, activation::softmax};

use super::config::{AttnKind, LayerSpec};
use super::kv_cache::KvCache;
use super::ops::{Linear, RmsNorm, apply_rope, cast};

/// Weights of one attention block.
#[derive(Debug, Clone)]
pub struct Attention {
    pub(crate) q_proj: Linear,
    /// Absent on KV-shared layers.
    pub(crate) k_proj: Option<Linear>,
    /// Absent on KV-shared layers and on full layers with `attention_k_eq_v`.
    pub(crate) v_proj: Option<Linear>,
    pub(crate) o_proj: Linear,
    pub(crate) q_norm: RmsNorm,
    pub(crate) k_norm: Option<RmsNorm>,
    /// Scale-less V norm (Gemma 4) or none (Gemma 3).
    pub(crate) v_norm: Option<RmsNorm>,
}

/// What one attention call needs besides the weights.
pub struct AttnInput<'a> {
    /// This layer's index.
    pub layer: usize,
    /// This layer's geometry.
    pub spec: &'a LayerSpec,
    /// Query heads.
    pub num_heads: usize,
    /// Logical position of the first query row.
    pub q_start: usize,
    /// RoPE tables for the query rows, which are also the rows of the new keys.
    pub cos: &'a Tensor<2>,
    /// See `cos`.
    pub sin: &'a Tensor<2>,
    /// Sliding window of the model (keys visible to a query, itself included).
    pub window: usize,
    /// Multiplier on the scores.
    pub scale: f32,
    /// Softcap on the scores.
    pub softcap: Option<f32>,
    /// Masks already built in this forward.
    pub masks: &'a MaskCache,
    /// Spans of positions that see each other both ways on sliding layers (an image's soft
    /// tokens on a `use_bidirectional_attention: "vision"` model).
    pub blocks: &'a [std::ops::Range<usize>],
    /// How those spans see each other.
    pub image_blocks: super::config::ImageBlocks,
}

/// The masks built during one forward, shared by the layers that need the same one (every
/// sliding layer of a prefill chunk needs the same mask, every full layer another): building
/// one is O(T·S) on the host plus an upload.
#[derive(Default)]
pub struct MaskCache(RefCell<Vec<(MaskKey, Option<Tensor<2>>)>>);

/// Sliding?, first query position, query rows, first key position, keys, group size.
type MaskKey = (bool, usize, usize, usize, usize, usize);

impl MaskCache {
    fn get_or_build(
        &self,
        key: MaskKey,
        build: impl FnOnce() -> Option<Tensor<2>>,
    ) -> Option<Tensor<2>> {
        if let Some((_, m)) = self.0.borrow().iter().find(|(k, _)| *k == key) {
            return m.clone();
        }
        let m = build();
        self.0.borrow_mut().push((key, m.clone()));
        m
    }
}

impl Attention {
    /// The projections a layer runs on its input, in order: q, then k and v unless the layer
    /// reads a donor's cache (v absent with `attention_k_eq_v`).
    pub(crate) fn projections(&self, spec: &LayerSpec) -> Vec<&Linear> {
        let own_k = spec
            .kv_donor
            .is_none()
            .then_some(self.k_proj.as_ref())
            .flatten();
        let own_v = own_k.and(self.v_proj.as_ref());
        let mut projs = vec![&self.q_proj];
        projs.extend(own_k);
        projs.extend(own_v);
        projs
    }

    /// # Shapes
    /// - x: `[T, H]` (already normed) → `[T, H]`
    pub fn forward(&self, x: Tensor<2>, cache: &mut KvCache, a: &AttnInput) -> Tensor<2> {
        let [t, _] = x.dims();
        let hd = a.spec.head_dim;
        let (nh, nkv) = (a.num_heads, a.spec.kv_heads);
        let dtype = x.dtype();
        let device = x.device();

        // q, k and v read the same input: one call runs them together.
        let mut outs = Linear::forward_many(&self.projections(a.spec), x).into_iter();
        let q = outs.next().expect("q").reshape([t, nh, hd]);
        let q = self.q_norm.forward(q).swap_dims(0, 1);
        let q = apply_rope(q, a.cos, a.sin);

        let read_from = match (a.spec.kv_donor, outs.next()) {
            (Some(donor), _) => donor,
            (None, Some(k_raw)) => {
                let k_raw = k_raw.reshape([t, nkv, hd]);
                let v_raw = match outs.next() {
                    Some(v) => v.reshape([t, nkv, hd]),
                    None => k_raw.clone(),
                };
                let k = match &self.k_norm {
                    Some(n) => n.forward(k_raw),
                    None => k_raw,
                };
                let k = apply_rope(k.swap_dims(0, 1), a.cos, a.sin);
                let v = match &self.v_norm {
                    Some(n) => n.forward(v_raw),
                    None => v_raw,
                }
                .swap_dims(0, 1);
                cache.append(a.layer, k, v);
                a.layer
            }
            (None, None) => unreachable!("non-shared layers always have k_proj"),
        };
        let kv = cache
            .layer(read_from)
            .expect("the donor layer runs before its KV-shared layers");
        let (s, k_start) = (kv.len(), kv.start);
        let (keys, values) = kv.view();
        let g = nh / nkv;
        // Heads are grouped contiguously: query head h reads KV head h / g. Folding the group
        // into the row axis avoids copying K/V per query head.
        let q = q.reshape([nkv, g * t, hd]);
        let mut scores = q.matmul(keys.swap_dims(1, 2));
        scores = cast(scores, DType::F32).mul_scalar(a.scale);
        if let Some(c) = a.softcap {
            scores = scores.div_scalar(c).tanh().mul_scalar(c);
        }
        let key = (
            a.spec.kind == AttnKind::Sliding,
            a.q_start,
            t,
            k_start,
            s,
            g,
        );
        let mask = a
            .masks
            .get_or_build(key, || build_mask(a, k_start, s, t, g, &device));
        if let Some(mask) = mask {
            scores = scores + mask.unsqueeze::<3>();
        }
        let probs = cast(softmax(scores, 2), dtype);
        let out = probs.matmul(values); // [nkv, g*t, hd]
        let out = out
            .reshape([nh, t, hd])
            .swap_dims(0, 1)
            .reshape([t, nh * hd]);
        self.o_proj.forward(out)
    }
}

/// Additive mask `[g·T, S]` (0 or −∞) on logical positions, or `None` when every key is visible.
fn build_mask(
    a: &AttnInput,
    k_start: usize,
    s: usize,
    t: usize,
    g: usize,
    device: &Device,
) -> Option<Tensor<2>> {
    let sliding = a.spec.kind == AttnKind::Sliding;
    let visible = |p: usize, j: usize| {
        super::soft::visible(a.image_blocks, a.blocks, a.spec.kind, a.window, p).contains(&j)
    };
    // Every key is visible when the newest key is no later than the first query and, on sliding
    // layers, the oldest key is still inside the last query's window: O(1), not O(T·S).
    let (q_last, k_last) = (a.q_start + t - 1, k_start + s - 1);
    if k_last <= a.q_start && (!sliding || q_last - k_start < a.window) {
        return None;
    }
    let mut row_masks = Vec::with_capacity(t * s);
    for r in 0..t {
        for c in 0..s {
            let ok = visible(a.q_start + r, k_start + c);
            row_masks.push(if ok { 0.0f32 } else { f32::NEG_INFINITY });
        }
    }
    let mut data = Vec::with_capacity(g * t * s);
    for _ in 0..g {
        data.extend_from_slice(&row_masks);
    }
    Some(Tensor::<2>::from_data(
        TensorData::new(data, [g * t, s]),
        device,
    ))
}
