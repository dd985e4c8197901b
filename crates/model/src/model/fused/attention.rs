//! Self-attention of one layer in the fused host step: q/k/v in one pass of the kernels, the
//! per-head norms and RoPE in place, the new keys and values appended to the host cache, and
//! each query head's scores, softmax and weighted values over the cache (heads on the
//! kernels' thread team once the history is long enough to pay for it).

use std::sync::{Mutex, OnceLock, PoisonError};

use super::super::attention::Attention;
use super::super::config::{AttnKind, LayerSpec};
use super::super::host_math::{Group, Part, attend, attend_part, join_parts, norm_rows, rope};
use super::super::kv_cache::{KvCache, Rows};
use super::{FUSED_MAX_ROWS, Step, products};
use crate::error::{Error, Result};
use gemma_kernels::qmatmul::{gemm_with, team};
use gemma_kernels::vmath;

/// Query rows per block of a long chunk's attention.
const ATTENTION_BLOCK: usize = 64;

/// Below this many multiply-adds per layer (query heads × keys × head dim × rows) the heads run
/// on the calling thread.
const PARALLEL_WORK: usize = 1 << 16;

/// How a layer's queries meet its keys: the heads, their width, how many query heads share a
/// KV head, and how many keys the cache holds.
#[derive(Clone, Copy)]
pub(crate) struct Heads {
    pub rows: usize,
    pub nh: usize,
    pub nkv: usize,
    pub hd: usize,
    pub keys: usize,
}

impl Heads {
    /// Query heads per KV head.
    fn group(&self) -> usize {
        self.nh / self.nkv
    }
}

impl Step<'_> {
    /// # Shapes
    /// - xn: `[rows, H]` (already normed) → `[rows, H]`
    pub(super) fn attention(
        &self,
        attn: &Attention,
        spec: &LayerSpec,
        layer: usize,
        xn: &[f32],
        cache: &mut KvCache,
    ) -> Result<Vec<f32>> {
        let cfg = self.model.config();
        let (q, read_from) = self.project(attn, spec, layer, xn, cache);
        let kv = cache
            .layer(read_from)
            .ok_or_else(|| Error::Invalid(format!("layer {layer} reads an empty cache")))?;
        let start = kv.start;
        let view = kv
            .host()
            .ok_or_else(|| Error::Invalid("the fused host step needs a host cache".into()))?;
        let (nh, nkv, hd) = (cfg.num_heads, spec.kv_heads, spec.head_dim);
        let heads = Heads {
            rows: self.rows,
            nh,
            nkv,
            hd,
            keys: view.len,
        };
        let (group, window) = (heads.group(), cfg.sliding_window);
        // One group per (row, KV head): the `group · hd` outputs of its query heads, which
        // are contiguous in the `[rows, nh·hd]` output (head h reads KV head h / group).
        let of = |i: usize| {
            let (r, kvh) = (i / nkv, i % nkv);
            let p = self.q_start + r;
            // Keys at logical positions start + j, visible when j ≤ p and inside the window, or
            // in p's image as the model's rule says.
            let seen =
                super::super::soft::visible(cfg.image_blocks, self.blocks, spec.kind, window, p);
            let last = seen.end.saturating_sub(start).min(heads.keys);
            let first = seen.start.saturating_sub(start).min(last);
            let from = (r * nh + kvh * group) * hd;
            Group {
                q: &q[from..from + group * hd],
                dim: hd,
                k: view.k,
                v: view.v,
                stride: nkv * hd,
                offset: kvh * hd,
                keys: first..last,
                scale: cfg.attn_scale,
                softcap: cfg.attn_logit_softcapping,
            }
        };
        let out = attend_groups(heads, &of);
        Ok(products(&[&attn.o_proj], &out, self.rows).remove(0))
    }

    /// The layer's queries (normed, rotated) and the layer whose cache they read: its own, with
    /// this step's keys and values appended, or its KV donor's.
    fn project(
        &self,
        attn: &Attention,
        spec: &LayerSpec,
        layer: usize,
        xn: &[f32],
        cache: &mut KvCache,
    ) -> (Vec<f32>, usize) {
        let (rows, hd) = (self.rows, spec.head_dim);
        // The forward's tables for this kind, from the first row still computed.
        let tables = match spec.kind {
            AttnKind::Sliding => &self.rope.0,
            AttnKind::Full => &self.rope.1,
        };
        let tables = &tables[self.q_start - self.pos..];
        let rotate = |x: &mut [f32]| {
            for (r, row) in x.chunks_exact_mut(x.len() / rows).enumerate() {
                let (cos, sin) = &tables[r];
                row.chunks_exact_mut(hd).for_each(|h| rope(h, cos, sin));
            }
        };
        let mut outs = products(&attn.projections(spec), xn, rows).into_iter();
        let mut q = outs.next().expect("q");
        norm_rows(&attn.q_norm, &mut q, hd);
        rotate(&mut q);
        let read_from = match (spec.kv_donor, outs.next()) {
            (Some(donor), _) => donor,
            (None, Some(mut k)) => {
                let mut v = outs.next().unwrap_or_else(|| k.clone());
                if let Some(n) = &attn.k_norm {
                    norm_rows(n, &mut k, hd);
                }
                rotate(&mut k);
                if let Some(n) = &attn.v_norm {
                    norm_rows(n, &mut v, hd);
                }
                cache.append_host(layer, (spec.kv_heads, hd), &self.model.device, &k, &v);
                layer
            }
            (None, None) => unreachable!("non-shared layers always have k_proj"),
        };
        (q, read_from)
    }
}

/// Every group's attention (`of(i)` is group i: row `i / nkv`, KV head `i % nkv`), into the
/// `[rows, nh·hd]` output: as GEMMs for a prefill chunk, on this thread for small work, else
/// split over the team.
pub(crate) fn attend_groups<'a>(h: Heads, of: &(dyn Fn(usize) -> Group<'a> + Sync)) -> Vec<f32> {
    let (group, width) = (h.group(), h.group() * h.hd);
    let mut out = vec![0f32; h.rows * h.nh * h.hd];
    let threads = team().threads();
    if h.rows > FUSED_MAX_ROWS && gemma_kernels::qmatmul::gemm_available() {
        // A prefill chunk: each group's scores and weighted values as two GEMMs.
        // In blocks of rows, each against only the keys its rows see: a causal chunk's
        // later keys are masked for its earlier rows.
        for kvh in 0..h.nkv {
            let groups: Vec<Group> = (0..h.rows).map(|r| of(r * h.nkv + kvh)).collect();
            for (b, block) in groups.chunks(ATTENTION_BLOCK).enumerate() {
                let o = chunk_attention(block, h.hd);
                for (i, or) in o.chunks_exact(width).enumerate() {
                    let r = b * ATTENTION_BLOCK + i;
                    let from = (r * h.nh + kvh * group) * h.hd;
                    out[from..from + width].copy_from_slice(or);
                }
            }
        }
    } else if threads == 1 || h.rows * h.nh * h.keys * h.hd < PARALLEL_WORK {
        for (i, o) in out.chunks_exact_mut(width).enumerate() {
            attend(&of(i), o);
        }
    } else {
        attend_split(h, of, threads, &mut out);
    }
    out
}

/// Each group's keys in `split` parts over the team (so that one group, a decode step with one
/// KV head, still uses every thread), joined by their softmax statistics.
fn attend_split<'a>(
    h: Heads,
    of: &(dyn Fn(usize) -> Group<'a> + Sync),
    threads: usize,
    out: &mut [f32],
) {
    let (group, width, groups) = (h.group(), h.group() * h.hd, h.rows * h.nkv);
    let split = threads.div_ceil(groups).max(1);
    let parts: Vec<OnceLock<Part>> = (0..groups * split).map(|_| OnceLock::new()).collect();
    team().run(groups * split, &|i| {
        let g = of(i / split);
        let (n, s) = (g.keys.len(), i % split);
        let keys = g.keys.start + n * s / split..g.keys.start + n * (s + 1) / split;
        let (mut o, mut st) = (vec![0f32; width], vec![(f32::NEG_INFINITY, 0f32); group]);
        if !keys.is_empty() {
            attend_part(&Group { keys, ..g }, &mut o, &mut st);
        }
        let _ = parts[i].set((o, st));
    });
    let done: Vec<Part> = parts
        .into_iter()
        .map(|p| p.into_inner().expect("every part ran"))
        .collect();
    for (o, ps) in out.chunks_exact_mut(width).zip(done.chunks(split)) {
        join_parts(ps, h.hd, o);
    }
}

/// One KV head's attention for every row of a long chunk, given each row's [`Group`] (the
/// same keys and values, each row its own queries and visible range): the scores of all rows'
/// queries against the keys any row sees as one GEMM, the masked, capped softmax per query on
/// the host, and the weighted values as a second GEMM. `rows × group × dim` values out.
fn chunk_attention(rows: &[Group], dim: usize) -> Vec<f32> {
    let g0 = &rows[0];
    let heads = g0.q.len() / dim;
    let lo = rows.iter().map(|g| g.keys.start).min().unwrap_or(0);
    let hi = rows.iter().map(|g| g.keys.end).max().unwrap_or(0);
    let nk = hi - lo;
    let (stride, offset) = (g0.stride, g0.offset);
    let q: Vec<f32> = rows.iter().flat_map(|g| g.q.iter().copied()).collect();
    let t = rows.len() * heads;
    // Scores: queries × keys lo..hi, the keys' rows copied out of the position-major cache.
    let mut s = gemm_with(nk, dim, &q, t, &|range, dst| {
        for (j, d) in range.zip(dst.chunks_exact_mut(dim)) {
            g0.k.read_into((lo + j) * stride + offset, d);
        }
    });
    // The masked, capped softmax of each query's row, rows split over the team.
    let per = t.div_ceil(team().threads() * 4).max(1);
    {
        let slots: Vec<Mutex<&mut [f32]>> = s.chunks_mut(per * nk).map(Mutex::new).collect();
        team().run(slots.len(), &|c| {
            let mut part = slots[c].lock().unwrap_or_else(PoisonError::into_inner);
            for (i, row) in part.chunks_exact_mut(nk).enumerate() {
                let g = &rows[(c * per + i) / heads];
                softmax_visible(row, g.keys.start - lo..g.keys.end - lo, g.scale, g.softcap);
            }
        });
    }
    // Weighted values: probabilities × Vᵀ, whose row d is dimension d of every key's value,
    // read in place from an f32 cache, else from this head's values widened once.
    let wide: Vec<f32>;
    let (vals, first, vstride, voff) = match g0.v {
        Rows::F32(x) => (x, lo, stride, offset),
        v => {
            let mut w = vec![0f32; (hi - lo) * dim];
            for (j, row) in w.chunks_exact_mut(dim).enumerate() {
                v.read_into((lo + j) * stride + offset, row);
            }
            wide = w;
            (&wide[..], 0, dim, 0)
        }
    };
    gemm_with(dim, nk, &s, t, &|range, dst| {
        for (d, out) in range.zip(dst.chunks_exact_mut(nk)) {
            for (j, o) in out.iter_mut().enumerate() {
                *o = vals[(first + j) * vstride + voff + d];
            }
        }
    })
}

/// Scales, caps and normalises `row[visible]` into probabilities; the rest becomes zero.
fn softmax_visible(row: &mut [f32], visible: std::ops::Range<usize>, scale: f32, cap: Option<f32>) {
    let (a, b) = (visible.start, visible.end);
    let seen = &mut row[a..b];
    seen.iter_mut().for_each(|v| *v *= scale);
    if let Some(c) = cap {
        vmath::softcap_slice(seen, c);
    }
    let max = seen.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let inv = 1.0 / vmath::exp_sub_sum(seen, max);
    seen.iter_mut().for_each(|v| *v *= inv);
    row[..a].fill(0.0);
    row[b..].fill(0.0);
}
