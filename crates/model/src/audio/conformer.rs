//! One conformer layer of the audio tower (transformers' `Gemma4AudioLayer`): a half-step FFN,
//! the chunked attention between its norms, the light conv (GLU, causal depthwise conv, norm,
//! swish), a second half-step FFN and the output norm. Every `torch.clamp` of the reference is
//! here (`gradient_clipping` around the norms, the clipped linears' own bounds), and every norm
//! keeps its reference ε: the FFNs' and the layer's own norms are built without one in
//! transformers (1e-6), the light conv's take `rms_norm_eps`.

use super::attention::Attention;
use super::config::AudioSpec;
use super::{norm, values};
use crate::error::Result;
use crate::model::host_math::norm_rows;
use crate::model::ops::RmsNorm;
use crate::vision::vit::Clipped;
use crate::weights::TensorSource;

/// ε of the RMSNorms transformers builds without one.
const DEFAULT_EPS: f64 = 1e-6;

#[derive(Debug)]
struct FeedForward {
    pre: RmsNorm,
    up: Clipped,
    down: Clipped,
    post: RmsNorm,
}

#[derive(Debug)]
struct LightConv {
    pre: RmsNorm,
    start: Clipped,
    /// `[hidden, kernel]`.
    depthwise: Vec<f32>,
    conv_norm: RmsNorm,
    end: Clipped,
}

/// A conformer layer's weights.
#[derive(Debug)]
pub(super) struct Layer {
    ff1: FeedForward,
    norm_pre_attn: RmsNorm,
    attn: Attention,
    norm_post_attn: RmsNorm,
    lconv: LightConv,
    ff2: FeedForward,
    norm_out: RmsNorm,
}

fn weighted(src: &dyn TensorSource, name: &str, n: usize, eps: f64) -> Result<RmsNorm> {
    values(src, &format!("{name}.weight"), &[n]).map(|w| norm(Some(w), eps))
}

impl Layer {
    pub(super) fn load(src: &dyn TensorSource, s: &AudioSpec, i: usize) -> Result<Self> {
        let p = format!("audio_tower.layers.{i}");
        let h = s.hidden;
        let lin =
            |n: &str, shape: &[usize]| Clipped::load(src, &format!("{p}.{n}"), shape, s.clipped);
        let ffn = |f: &str| -> Result<FeedForward> {
            Ok(FeedForward {
                pre: weighted(src, &format!("{p}.{f}.pre_layer_norm"), h, DEFAULT_EPS)?,
                up: lin(&format!("{f}.ffw_layer_1"), &[4 * h, h])?,
                down: lin(&format!("{f}.ffw_layer_2"), &[h, 4 * h])?,
                post: weighted(src, &format!("{p}.{f}.post_layer_norm"), h, DEFAULT_EPS)?,
            })
        };
        let c = "lconv1d";
        let lconv = LightConv {
            pre: weighted(src, &format!("{p}.{c}.pre_layer_norm"), h, s.eps)?,
            start: lin(&format!("{c}.linear_start"), &[2 * h, h])?,
            depthwise: depthwise(src, &format!("{p}.{c}.depthwise_conv1d.weight"), s)?,
            conv_norm: weighted(src, &format!("{p}.{c}.conv_norm"), h, s.eps)?,
            end: lin(&format!("{c}.linear_end"), &[h, h])?,
        };
        Ok(Self {
            ff1: ffn("feed_forward1")?,
            norm_pre_attn: weighted(src, &format!("{p}.norm_pre_attn"), h, DEFAULT_EPS)?,
            attn: Attention::load(src, s, i)?,
            norm_post_attn: weighted(src, &format!("{p}.norm_post_attn"), h, DEFAULT_EPS)?,
            lconv,
            ff2: ffn("feed_forward2")?,
            norm_out: weighted(src, &format!("{p}.norm_out"), h, DEFAULT_EPS)?,
        })
    }

    /// `x`: `n × hidden`, updated in place; `mask`: which frames are audio.
    pub(super) fn forward(&self, x: &mut [f32], mask: &[bool], s: &AudioSpec) {
        let (h, n, clip) = (s.hidden, mask.len(), s.gradient_clipping);
        self.ff1.forward(x, n, s);
        let mut a = clamped(x, clip);
        norm_rows(&self.norm_pre_attn, &mut a, h);
        let mut a = self.attn.forward(&a, n, mask, s);
        clamp(&mut a, clip);
        norm_rows(&self.norm_post_attn, &mut a, h);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        self.lconv.forward(x, n, s);
        self.ff2.forward(x, n, s);
        clamp(x, clip);
        norm_rows(&self.norm_out, x, h);
    }
}

impl FeedForward {
    /// `x += residual_weight · post(ffw2(swish(ffw1(pre(clamp(x))))))`, clamped before `post`.
    fn forward(&self, x: &mut [f32], n: usize, s: &AudioSpec) {
        let mut y = clamped(x, s.gradient_clipping);
        norm_rows(&self.pre, &mut y, s.hidden);
        let mut u = self.up.forward(&y, n);
        u.iter_mut().for_each(|v| *v = silu(*v));
        let mut d = self.down.forward(&u, n);
        clamp(&mut d, s.gradient_clipping);
        norm_rows(&self.post, &mut d, s.hidden);
        let w = s.residual_weight;
        x.iter_mut().zip(&d).for_each(|(x, d)| *x += d * w);
    }
}

impl LightConv {
    /// `x += end(swish(norm(clamp(causal_depthwise(glu(start(pre(x))))))))`.
    fn forward(&self, x: &mut [f32], n: usize, s: &AudioSpec) {
        let h = s.hidden;
        let mut y = x.to_vec();
        norm_rows(&self.pre, &mut y, h);
        let wide = self.start.forward(&y, n);
        // GLU: the first half gated by the sigmoid of the second.
        let glu: Vec<f32> = wide
            .chunks_exact(2 * h)
            .flat_map(|r| {
                r[..h]
                    .iter()
                    .zip(&r[h..])
                    .map(|(a, b)| a / (1.0 + (-b).exp()))
            })
            .collect();
        let k = s.conv_kernel;
        let mut c = vec![0f32; n * h];
        for t in 0..n {
            let row = &mut c[t * h..(t + 1) * h];
            // Output t reads inputs t − (k − 1) … t (left padding only).
            for j in 0..k {
                let Some(src) = (t + j).checked_sub(k - 1) else {
                    continue;
                };
                let input = &glu[src * h..(src + 1) * h];
                for (d, (o, v)) in row.iter_mut().zip(input).enumerate() {
                    *o += self.depthwise[d * k + j] * v;
                }
            }
        }
        clamp(&mut c, s.gradient_clipping);
        norm_rows(&self.conv_norm, &mut c, h);
        c.iter_mut().for_each(|v| *v = silu(*v));
        let out = self.end.forward(&c, n);
        x.iter_mut().zip(&out).for_each(|(x, o)| *x += o);
    }
}

/// The depthwise kernel `[hidden, 1, k]` (checkpoint) or `[hidden, k]` (mmproj) as `[hidden, k]`.
fn depthwise(src: &dyn TensorSource, name: &str, s: &AudioSpec) -> Result<Vec<f32>> {
    let (h, k) = (s.hidden, s.conv_kernel);
    match src.shape(name).as_deref() {
        Some([_, _]) => values(src, name, &[h, k]),
        _ => values(src, name, &[h, 1, k]),
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn clamp(x: &mut [f32], bound: f32) {
    x.iter_mut().for_each(|v| *v = v.clamp(-bound, bound));
}

fn clamped(x: &[f32], bound: f32) -> Vec<f32> {
    x.iter().map(|v| v.clamp(-bound, bound)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swish_and_clamps() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(2.0) - 2.0 / (1.0 + (-2f32).exp())).abs() < 1e-7);
        let mut v = [-3.0, 0.5, 7.0];
        clamp(&mut v, 2.0);
        assert_eq!(v, [-2.0, 0.5, 2.0]);
    }
}
