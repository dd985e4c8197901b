//! The 12B's encoder-free embedder (transformers' `Gemma4UnifiedVisionEmbedder`): each raw
//! 48-pixel patch (values in [0, 1], no shift) through LayerNorm → Dense (+bias) → LayerNorm,
//! plus the factorized position rows of its (x, y), then LayerNorm. No attention, no pooling:
//! one soft token per patch.

use super::config::{UnifiedSpec, VisionSpec};
use super::{PatchInput, matrix, products, values};
use crate::error::Result;
use crate::weights::TensorSource;
use gemma_kernels::qmatmul::QMatrix;

/// ε of torch's `nn.LayerNorm`, which the embedder builds with its default.
const LN_EPS: f64 = 1e-5;

#[derive(Debug)]
struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl LayerNorm {
    fn load(src: &dyn TensorSource, name: &str, n: usize) -> Result<Self> {
        Ok(Self {
            weight: values(src, &format!("{name}.weight"), &[n])?,
            bias: values(src, &format!("{name}.bias"), &[n])?,
        })
    }

    fn forward(&self, x: &mut [f32]) {
        let n = self.weight.len();
        for row in x.chunks_exact_mut(n) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / n as f64;
            let inv = 1.0 / (var + LN_EPS).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = ((f64::from(*v) - mean) * inv) as f32 * w + b;
            }
        }
    }
}

/// The embedder's weights.
#[derive(Debug)]
pub(super) struct Unified {
    spec: UnifiedSpec,
    ln1: LayerNorm,
    dense: QMatrix,
    dense_bias: Vec<f32>,
    ln2: LayerNorm,
    /// `[positions, 2, width]` as `2 · positions` rows (x, y per position), kept in its stored
    /// type and read a row at a time.
    table: QMatrix,
    pos_norm: LayerNorm,
}

impl Unified {
    pub(super) fn load(s: &UnifiedSpec, vs: &VisionSpec, src: &dyn TensorSource) -> Result<Self> {
        let side = vs.patch * vs.pool;
        let (input, w) = (side * side * 3, s.width);
        let p = "vision_embedder";
        Ok(Self {
            spec: s.clone(),
            ln1: LayerNorm::load(src, &format!("{p}.patch_ln1"), input)?,
            dense: matrix(src, &format!("{p}.patch_dense.weight"), &[w, input])?,
            dense_bias: values(src, &format!("{p}.patch_dense.bias"), &[w])?,
            ln2: LayerNorm::load(src, &format!("{p}.patch_ln2"), w)?,
            table: matrix(src, &format!("{p}.pos_embedding"), &[s.positions, 2, w])?,
            pos_norm: LayerNorm::load(src, &format!("{p}.pos_norm"), w)?,
        })
    }

    /// One embedding per patch: `n × width` values.
    pub(super) fn forward(&self, input: PatchInput) -> Result<Vec<f32>> {
        let (w, n) = (self.spec.width, input.positions.len());
        super::check_positions(input.positions, self.spec.positions, 1)?;
        let mut x = input.values.to_vec();
        self.ln1.forward(&mut x);
        let mut y = products(&self.dense, &x, n);
        for row in y.chunks_exact_mut(w) {
            row.iter_mut()
                .zip(&self.dense_bias)
                .for_each(|(v, b)| *v += b);
        }
        self.ln2.forward(&mut y);
        for (row, &[px, py]) in y.chunks_exact_mut(w).zip(input.positions) {
            let t = (self.table).dequantize_rows(&[px as usize * 2, py as usize * 2 + 1]);
            let (tx, ty) = t.split_at(w);
            for ((v, a), b) in row.iter_mut().zip(tx).zip(ty) {
                *v += a + b;
            }
        }
        self.pos_norm.forward(&mut y);
        Ok(y)
    }
}
