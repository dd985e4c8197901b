//! The audio tower's front (transformers' `Gemma4AudioSubSampleConvProjection`): a clip's
//! log-mel frames through two blocks of [frames zeroed where the mask says padding → Conv2d
//! 3 × 3, stride 2, padding 1, no bias → LayerNorm over channels (weight, no bias) → ReLU], the
//! mask halved by each (`mask[::2]`), then each frame's (bin, channel) values mapped to the
//! conformer width. Activations are kept channel-last (`[time, bin, channel]`), the layout the
//! final projection reads, and each convolution is one GEMM over unfolded 3 × 3 patches.

use super::config::AudioSpec;
use super::{matrix, products, values};
use crate::error::Result;
use crate::weights::TensorSource;
use gemma_kernels::qmatmul::QMatrix;

/// Output rows a GEMM at most, so that the unfolded patches stay small.
const ROWS_A_STEP: usize = 4096;

#[derive(Debug)]
struct ConvBlock {
    /// `[out channels, in channels · 9]`, the kernel unfolded (channel, row, column).
    w: QMatrix,
    /// LayerNorm weight, `[out channels]`.
    norm: Vec<f32>,
    cin: usize,
    cout: usize,
}

/// The two conv blocks and the projection.
#[derive(Debug)]
pub(super) struct Subsample {
    blocks: [ConvBlock; 2],
    /// `[hidden, bins/4 · channels]`.
    proj: QMatrix,
    eps: f32,
}

impl Subsample {
    pub(super) fn load(s: &AudioSpec, src: &dyn TensorSource) -> Result<Self> {
        let p = "audio_tower.subsample_conv_projection";
        let block = |i: usize, cin: usize, cout: usize| -> Result<ConvBlock> {
            let name = format!("{p}.layer{i}.conv.weight");
            let mut b = src.blocks(&name, &[cout, cin, 3, 3])?;
            b.shape = vec![cout, cin * 9];
            let w = super::from_blocks(src, &name, b)?;
            let norm = values(src, &format!("{p}.layer{i}.norm.weight"), &[cout])?;
            Ok(ConvBlock { w, norm, cin, cout })
        };
        let [c0, c1] = s.conv_channels;
        let blocks = [block(0, 1, c0)?, block(1, c0, c1)?];
        let proj = matrix(
            src,
            &format!("{p}.input_proj_linear.weight"),
            &[s.hidden, s.subsampled_bins() * c1],
        )?;
        Ok(Self {
            blocks,
            proj,
            eps: s.eps as f32,
        })
    }

    /// `frames × bins` features and their mask → `(⌈⌈frames/2⌉/2⌉ × hidden, the mask of those
    /// frames)`.
    pub(super) fn forward(
        &self,
        features: &[f32],
        mask: &[bool],
        bins: usize,
    ) -> (Vec<f32>, Vec<bool>) {
        let (mut x, mut m, mut dims) = (features.to_vec(), mask.to_vec(), (mask.len(), bins));
        for b in &self.blocks {
            for (row, &valid) in x.chunks_exact_mut(dims.1 * b.cin).zip(&m) {
                if !valid {
                    row.fill(0.0);
                }
            }
            let (y, out) = b.forward(&x, dims, self.eps);
            (x, dims) = (y, out);
            m = m.iter().step_by(2).copied().collect();
        }
        let frames = dims.0;
        (products(&self.proj, &x, frames), m)
    }
}

impl ConvBlock {
    /// `[time, bins, cin]` → `[⌈time/2⌉, ⌈bins/2⌉, cout]`, normed and rectified.
    fn forward(&self, x: &[f32], (t, f): (usize, usize), eps: f32) -> (Vec<f32>, (usize, usize)) {
        let (t1, f1) = (t.div_ceil(2), f.div_ceil(2));
        let k = self.cin * 9;
        let mut out = Vec::with_capacity(t1 * f1 * self.cout);
        let rows_a_step = (ROWS_A_STEP / f1.max(1)).max(1);
        let mut patches = Vec::new();
        for start in (0..t1).step_by(rows_a_step) {
            let end = (start + rows_a_step).min(t1);
            patches.clear();
            patches.resize((end - start) * f1 * k, 0.0);
            for (r, row) in patches.chunks_exact_mut(k).enumerate() {
                let (ot, of) = (start + r / f1, r % f1);
                self.unfold(x, (t, f), (ot, of), row);
            }
            let mut y = products(&self.w, &patches, (end - start) * f1);
            for v in y.chunks_exact_mut(self.cout) {
                layer_norm(v, &self.norm, eps);
                v.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            out.extend_from_slice(&y);
        }
        (out, (t1, f1))
    }

    /// The 3 × 3 input patch of output `(ot, of)`, (channel, row, column) order, zero outside.
    fn unfold(&self, x: &[f32], (t, f): (usize, usize), (ot, of): (usize, usize), row: &mut [f32]) {
        for kh in 0..3 {
            let Some(it) = (2 * ot + kh).checked_sub(1).filter(|&i| i < t) else {
                continue;
            };
            for kw in 0..3 {
                let Some(jf) = (2 * of + kw).checked_sub(1).filter(|&j| j < f) else {
                    continue;
                };
                let at = (it * f + jf) * self.cin;
                for (ci, &v) in x[at..at + self.cin].iter().enumerate() {
                    row[ci * 9 + kh * 3 + kw] = v;
                }
            }
        }
    }
}

/// PyTorch's LayerNorm without bias: `(v − mean) / √(var + ε) · w`, the biased variance.
fn layer_norm(v: &mut [f32], w: &[f32], eps: f32) {
    let n = v.len() as f32;
    let mean = v.iter().sum::<f32>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    v.iter_mut()
        .zip(w)
        .for_each(|(x, w)| *x = (*x - mean) * inv * w);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_norm_centres_and_scales() {
        let mut v = [1.0, 2.0, 3.0, 6.0];
        layer_norm(&mut v, &[1.0, 1.0, 2.0, 1.0], 0.0);
        // mean 3, variance 3.5
        let s = 3.5f32.sqrt();
        let want = [-2.0 / s, -1.0 / s, 0.0, 3.0 / s];
        for (a, b) in v.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
    }
}
