//! The conformer's chunked local self-attention (transformers' `Gemma4AudioAttention` with the
//! mask `Gemma4AudioModel.forward` builds): queries in blocks of `chunk` frames, each block
//! seeing `left − 1` frames before it and `right` after; logits are content (`q·k`) plus
//! relative position (`q` against a sinusoid table through `relative_k_proj`, placed by
//! Transformer-XL's shift), softcapped, then masked: a key outside the clip, a padding frame,
//! or outside the query's own window (`0 ≤ q − k < left − 1`, `0 < k − q < right`) gets
//! `attention_invalid_logits_value`. Queries are scaled per dimension by
//! `softplus(per_dim_scale) / (√head_dim · ln 2)`, keys by `ln(1 + e) / ln 2`.

use super::config::AudioSpec;
use super::{products, values};
use crate::error::Result;
use crate::model::host_math::dot;
use crate::vision::vit::Clipped;
use crate::weights::TensorSource;

/// One layer's attention weights, with its relative-position keys worked out at load.
#[derive(Debug)]
pub(super) struct Attention {
    q: Clipped,
    k: Clipped,
    v: Clipped,
    post: Clipped,
    /// `[positions, hidden]`: `relative_k_proj` of the sinusoid table, nearest-last.
    rel_k: Vec<f32>,
    /// Per query dimension: `softplus(per_dim_scale) / (√head_dim · ln 2)`.
    q_scale: Vec<f32>,
}

/// The sinusoid table of `Gemma4AudioRelPositionalEncoding`: rows for relative positions
/// `context/2, …, 1, 0`, each `[sin(p·τ), cos(p·τ)]` over `hidden/2` timescales τ.
pub(super) fn position_table(s: &AudioSpec) -> Vec<f32> {
    let half = s.hidden / 2;
    let step = (10_000f64).ln() / (half.saturating_sub(1)).max(1) as f64;
    let inv: Vec<f32> = (0..half)
        .map(|i| (-(i as f64) * step).exp() as f32)
        .collect();
    let top = s.context() / 2;
    let mut out = Vec::with_capacity((top + 1) * s.hidden);
    for p in (0..=top).rev() {
        let t: Vec<f32> = inv.iter().map(|&i| p as f32 * i).collect();
        out.extend(t.iter().map(|v| v.sin()));
        out.extend(t.iter().map(|v| v.cos()));
    }
    out
}

/// Whether query frame `q` may read key frame `k` (both in the clip), as the window says.
pub(super) fn in_window(s: &AudioSpec, q: usize, k: usize) -> bool {
    let dist = q as isize - k as isize;
    (dist >= 0 && dist < s.context_left as isize - 1)
        || (dist < 0 && -dist < s.context_right as isize)
}

/// Where Transformer-XL's blocked shift takes the logit of query `c` of a block and context
/// key `j`: the block's query row and relative-position row it reads, `None` for the zeros the
/// shift pads in.
pub(super) fn shifted(
    c: usize,
    j: usize,
    context: usize,
    positions: usize,
) -> Option<(usize, usize)> {
    let i = c * context + j;
    let (row, col) = (i / (context + 1), i % (context + 1));
    (col < positions).then_some((row, col))
}

impl Attention {
    pub(super) fn load(src: &dyn TensorSource, s: &AudioSpec, i: usize) -> Result<Self> {
        let p = format!("audio_tower.layers.{i}.self_attn");
        let h = s.hidden;
        let lin = |n: &str| Clipped::load(src, &format!("{p}.{n}"), &[h, h], s.clipped);
        let rel = super::matrix(src, &format!("{p}.relative_k_proj.weight"), &[h, h])?;
        let table = position_table(s);
        let rel_k = products(&rel, &table, table.len() / h);
        let hd = s.head_dim();
        // The mmproj stores the scale after its softplus.
        let soft = match src.shape(&format!("{p}.per_dim_scale_softplus")) {
            Some(_) => values(src, &format!("{p}.per_dim_scale_softplus"), &[hd])?,
            None => values(src, &format!("{p}.per_dim_scale"), &[hd])?
                .into_iter()
                .map(softplus)
                .collect(),
        };
        let base = (hd as f32).powf(-0.5) / std::f32::consts::LN_2;
        Ok(Self {
            q: lin("q_proj")?,
            k: lin("k_proj")?,
            v: lin("v_proj")?,
            post: lin("post")?,
            rel_k,
            q_scale: soft.iter().map(|v| base * v).collect(),
        })
    }

    /// `n × hidden` normed rows → the attention's `n × hidden` output; `mask`: which frames
    /// are audio.
    pub(super) fn forward(&self, x: &[f32], n: usize, mask: &[bool], s: &AudioSpec) -> Vec<f32> {
        let (h, hd) = (s.hidden, s.head_dim());
        let mut q = self.q.forward(x, n);
        for row in q.chunks_exact_mut(hd) {
            row.iter_mut().zip(&self.q_scale).for_each(|(v, s)| *v *= s);
        }
        let k_scale = (1.0 + std::f32::consts::E).ln() / std::f32::consts::LN_2;
        let mut k = self.k.forward(x, n);
        k.iter_mut().for_each(|v| *v *= k_scale);
        let v = self.v.forward(x, n);
        let positions = self.rel_k.len() / h;
        let mut out = vec![0f32; n * h];
        let mut logits = vec![0f32; s.context()];
        for head in 0..s.heads {
            let col = head * hd..(head + 1) * hd;
            // Every query against every relative position.
            let mut bd = vec![0f32; n * positions];
            for (r, row) in bd.chunks_exact_mut(positions).enumerate() {
                let qr = &q[r * h + col.start..r * h + col.end];
                for (j, b) in row.iter_mut().enumerate() {
                    *b = dot(qr, &self.rel_k[j * h + col.start..j * h + col.end]);
                }
            }
            for qi in 0..n {
                let qv = &q[qi * h + col.start..qi * h + col.end];
                self.logits(s, (qi, qv), (&k, &bd, mask), head, &mut logits);
                softmax(&mut logits);
                let o = &mut out[qi * h + col.start..qi * h + col.end];
                let first = (qi / s.chunk * s.chunk) as isize - (s.context_left as isize - 1);
                for (j, &w) in logits.iter().enumerate() {
                    let kf = first + j as isize;
                    if kf < 0 || kf as usize >= n || w == 0.0 {
                        continue;
                    }
                    let vr = &v[kf as usize * h + col.start..kf as usize * h + col.end];
                    o.iter_mut().zip(vr).for_each(|(o, v)| *o += w * v);
                }
            }
        }
        self.post.forward(&out, n)
    }

    /// Query `qi`'s capped and masked logits over its block's context.
    fn logits(
        &self,
        s: &AudioSpec,
        (qi, qv): (usize, &[f32]),
        (k, bd, mask): (&[f32], &[f32], &[bool]),
        head: usize,
        out: &mut [f32],
    ) {
        let (h, hd, n) = (s.hidden, s.head_dim(), mask.len());
        let positions = self.rel_k.len() / h;
        let (block, c) = (qi / s.chunk, qi % s.chunk);
        let first = (block * s.chunk) as isize - (s.context_left as isize - 1);
        let cap = s.logit_cap;
        for (j, l) in out.iter_mut().enumerate() {
            let kf = first + j as isize;
            let inside = kf >= 0 && (kf as usize) < n;
            let ac = if inside {
                let at = kf as usize * h + head * hd;
                dot(qv, &k[at..at + hd])
            } else {
                0.0
            };
            let rel = match shifted(c, j, s.context(), positions) {
                Some((r, col)) if block * s.chunk + r < n => {
                    bd[(block * s.chunk + r) * positions + col]
                }
                _ => 0.0,
            };
            let capped = cap * ((ac + rel) / cap).tanh();
            let ok = inside && mask[kf as usize] && in_window(s, qi, kf as usize);
            *l = if ok { capped } else { s.invalid_logit };
        }
    }
}

fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// In place, over every entry (a row of masked logits only becomes uniform, as in PyTorch).
fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    x.iter_mut().for_each(|v| {
        *v = (*v - max).exp();
        sum += *v;
    });
    x.iter_mut().for_each(|v| *v /= sum);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> AudioSpec {
        let root = serde_json::json!({
            "text_config": {"hidden_size": 8},
            "audio_config": {"hidden_size": 8, "num_attention_heads": 2},
        });
        AudioSpec::from_json(&root).expect("parses").expect("audio")
    }

    #[test]
    fn the_position_table_runs_from_half_the_context_down_to_zero() {
        let s = spec();
        let t = position_table(&s);
        // 24 keys of context: rows for 12, 11, …, 0; 4 timescales, the first 1, the last 1e-4.
        assert_eq!(t.len(), 13 * 8);
        let last = &t[12 * 8..];
        assert_eq!(last, &[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        assert!((t[0] - 12f32.sin()).abs() < 1e-6 && (t[4] - 12f32.cos()).abs() < 1e-6);
        assert!((t[3] - (12e-4f32).sin()).abs() < 1e-7);
    }

    #[test]
    fn a_query_sees_eleven_frames_back_and_none_ahead() {
        let s = spec();
        assert!(in_window(&s, 30, 30) && in_window(&s, 30, 19));
        assert!(!in_window(&s, 30, 18) && !in_window(&s, 30, 31));
    }

    #[test]
    fn the_shift_puts_the_diagonal_on_the_query_itself() {
        // Query c of a block sits at context key c + 12; relative row 12 is distance 0.
        for c in 0..12 {
            assert_eq!(shifted(c, c + 12, 24, 13), Some((c, 12)));
            assert_eq!(shifted(c, c, 24, 13), Some((c, 0)));
        }
        // Keys before the query's reach are the shift's padding.
        assert_eq!(shifted(5, 2, 24, 13), None);
    }

    #[test]
    fn a_fully_masked_row_is_uniform() {
        let mut x = [-1e9f32; 4];
        softmax(&mut x);
        assert_eq!(x, [0.25; 4]);
    }
}
