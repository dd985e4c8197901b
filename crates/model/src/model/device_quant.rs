//! A GGUF weight kept in its blocks on a GPU: the file's integer codes in burn's block-scaled
//! tensors (`Q4F` or `Q8F`, one scale per 16 or 32 values along the input axis), with, for the
//! types that have a min per block (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), the offsets beside them as
//! a dense `[out, in / block]` matrix. `x · Wᵀ = x · (scale ⊙ Q)ᵀ + blocksums(x) · offsetsᵀ`:
//! every GGML type without requantizing (`gemma_kernels::quant::Split`). On a CubeCL device the
//! products run through our block kernels (`cube`); elsewhere (burn's CPU backend, in tests)
//! through burn's block-scaled matmul. Built once at load; stateless after.

use std::sync::Arc;

use burn::tensor::quantization::{QuantMode, QuantScheme, QuantStore, QuantValue, ScaleDtype};
use burn::tensor::{DType, Device, Tensor, TensorData};
use gemma_kernels::qmatmul::QMatrix;
use gemma_kernels::quant::{Split, SplitKind};
use half::f16;

use super::ops::cast;

/// Values split per pass at load: bounds the host memory a large tensor takes on its way up.
const SPLIT_CHUNK: usize = 1 << 22;

/// The most bytes one device tensor of a matrix takes: larger matrices (an LM head, an
/// embedding table) go up in row bands of at most this, multiplied one after the other. wgpu
/// adapters cap one buffer (lavapipe and many WebGPU ones at 128 MiB or 256 MiB); a band's
/// product is still a large one.
const MAX_BAND_BYTES: usize = 1 << 27;

/// Input rows up to which a CubeCL device multiplies in one fused pass over the blocks (a
/// decode step, a drafted few); above, a band is dequantized for burn's dense matmul (llama.cpp
/// draws the same line between its MMVQ and its dequantize-then-GEMM paths).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
const MATVEC_MAX_ROWS: usize = 8;

/// Rows `from..` of a matrix as block-scaled integers, with their offsets.
#[derive(Debug, Clone)]
struct Band {
    /// `[rows, in]`, burn's quantized float: the integers and their scales.
    weight: Tensor<2>,
    /// `[rows, in / block]` in the compute dtype, for the types with a min.
    offsets: Option<Tensor<2>>,
    /// The same codes and scales for the block kernels, on a CubeCL device.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    blocks: Option<cube::Blocks>,
}

/// One weight matrix as block-scaled integers on the device.
#[derive(Debug, Clone)]
pub struct DeviceQuant {
    /// Row bands, in order.
    bands: Vec<Band>,
    /// Values per scale along the input axis.
    block: usize,
    /// The stored blocks (the mapped file's pages): rows for a lookup are read here.
    host: Arc<QMatrix>,
    /// Bytes the device holds for this matrix.
    device_bytes: usize,
}

impl DeviceQuant {
    /// Uploads `q` split into integers, scales and offsets, or `None` for a float type (which
    /// the caller keeps dense). Scales are f16 where the file's are (the 32-value types); the
    /// K-quants' `d · sc` products keep f32 when computing in f32 and are rounded to f16
    /// (2⁻¹² relative, 16 times finer than a bf16 weight's rounding) otherwise.
    pub fn upload(q: Arc<QMatrix>, device: &Device, dtype: DType) -> Option<Self> {
        Self::upload_in_bands(q, device, dtype, MAX_BAND_BYTES)
    }

    /// [`DeviceQuant::upload`] in row bands of at most `max_bytes` each.
    fn upload_in_bands(
        q: Arc<QMatrix>,
        device: &Device,
        dtype: DType,
        max_bytes: usize,
    ) -> Option<Self> {
        let kind = q.ty().split_kind()?;
        let (rows, cols) = (q.rows(), q.cols());
        // Integers, scales and offsets take at most 10 bits a weight.
        let band = (max_bytes * 8 / (10 * cols)).max(1);
        let mut device_bytes = 0;
        let bands = (0..rows)
            .step_by(band)
            .map(|from| {
                let part = q.row_range(from..(from + band).min(rows));
                let (b, bytes) = Band::upload(&part, kind, device, dtype);
                device_bytes += bytes;
                b
            })
            .collect();
        Some(Self {
            bands,
            block: kind.sub,
            host: q,
            device_bytes,
        })
    }

    /// `x · Wᵀ`.
    ///
    /// # Shapes
    /// - x: `[T, in]` → `[T, out]`
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let dtype = x.dtype();
        // Each block's sum of the input, in f32, for the offsets.
        let sums = self.bands[0].offsets.is_some().then(|| {
            let [t, k] = x.dims();
            let sums = cast(x.clone(), DType::F32)
                .reshape([t, k / self.block, self.block])
                .sum_dim(2)
                .reshape([t, k / self.block]);
            cast(sums, dtype)
        });
        let mut out: Vec<Tensor<2>> = self
            .bands
            .iter()
            .map(|b| {
                let y = b.product(&x);
                match (&b.offsets, &sums) {
                    (Some(o), Some(s)) => y + s.clone().matmul(o.clone().t()),
                    _ => y,
                }
            })
            .collect();
        if out.len() == 1 {
            out.remove(0)
        } else {
            Tensor::cat(out, 1)
        }
    }

    /// The stored blocks.
    pub fn host(&self) -> &QMatrix {
        &self.host
    }

    /// Bytes on the device.
    pub fn device_bytes(&self) -> usize {
        self.device_bytes
    }
}

impl Band {
    /// `x · Wᵀ` without the offsets: the block kernels on a CubeCL device, burn's block-scaled
    /// matmul elsewhere.
    fn product(&self, x: &Tensor<2>) -> Tensor<2> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if let Some(blocks) = &self.blocks {
            return if x.dims()[0] <= MATVEC_MAX_ROWS {
                blocks.matvec(x.clone())
            } else {
                blocks.matmul(x.clone())
            };
        }
        // The quantized matrix on the left, its blocks along the product's inner axis, as
        // burn's block-scaled matmul reads them (a transposed block-scaled operand is not).
        self.weight.clone().matmul(x.clone().t()).t()
    }

    /// Rows of a matrix, split and uploaded; the band and its device bytes.
    fn upload(q: &QMatrix, kind: SplitKind, device: &Device, dtype: DType) -> (Self, usize) {
        let (rows, cols) = (q.rows(), q.cols());
        let mut packed = Packed::new(kind, rows * cols);
        let chunk = (SPLIT_CHUNK / cols).max(1);
        for from in (0..rows).step_by(chunk) {
            let part = q.row_range(from..(from + chunk).min(rows));
            packed.push(&part.split().expect("a block type splits"));
        }
        let scale_dtype = packed.scale_dtype(dtype);
        let scheme = QuantScheme::default()
            .with_mode(QuantMode::Symmetric)
            .with_value(if kind.bits == 4 {
                QuantValue::Q4F
            } else {
                QuantValue::Q8F
            })
            .with_store(QuantStore::PackedU32(0))
            .per_block([kind.sub as u8], scale_dtype);
        let offsets = kind.offset.then(|| {
            let values = std::mem::take(&mut packed.offsets);
            let data = TensorData::new(values, [rows, cols / kind.sub]);
            cast(Tensor::<2>::from_data(data, device), dtype)
        });
        let bytes = packed.into_bytes(scale_dtype);
        let mut device_bytes = bytes.len();
        let data = TensorData::from_bytes_vec(bytes, [rows, cols], DType::QFloat(scheme));
        let weight = Tensor::<2>::from_data(data, device);
        device_bytes += offsets
            .as_ref()
            .map_or(0, |o| o.shape().num_elements() * dtype.size());
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        let blocks = cube::Blocks::of(&weight, kind.bits, kind.sub);
        let band = Self {
            weight,
            offsets,
            #[cfg(any(feature = "wgpu", feature = "cuda"))]
            blocks,
        };
        (band, device_bytes)
    }
}

/// A tensor's integers packed as burn lays them out (`PackedU32` along the rows: value `i` of a
/// word in bits `i · bits..`), with its scales and offsets.
struct Packed {
    kind: SplitKind,
    words: Vec<u32>,
    scales: Vec<f32>,
    offsets: Vec<f32>,
}

impl Packed {
    fn new(kind: SplitKind, values: usize) -> Self {
        let per_word = 32 / kind.bits as usize;
        let groups = values / kind.sub;
        Self {
            kind,
            words: Vec::with_capacity(values / per_word),
            scales: Vec::with_capacity(groups),
            offsets: Vec::with_capacity(if kind.offset { groups } else { 0 }),
        }
    }

    fn push(&mut self, s: &Split) {
        let bits = self.kind.bits as usize;
        let mask = (1u32 << bits) - 1;
        self.words.extend(s.ints.chunks_exact(32 / bits).map(|w| {
            w.iter()
                .enumerate()
                .fold(0u32, |acc, (i, &q)| acc | ((q as u32 & mask) << (i * bits)))
        }));
        self.scales.extend_from_slice(&s.scales);
        self.offsets.extend_from_slice(&s.offsets);
    }

    /// f16 when every scale is an f16 of the file, or when computing in 16 bits (where an f16
    /// scale is finer than the weights' own rounding would be); f32 otherwise, and wherever a
    /// scale would overflow f16.
    fn scale_dtype(&self, compute: DType) -> ScaleDtype {
        let fits = self
            .scales
            .iter()
            .all(|&s| f16::from_f32(s).to_f32().is_finite());
        if fits && (self.kind.f16_scales || compute != DType::F32) {
            ScaleDtype::F16
        } else {
            ScaleDtype::F32
        }
    }

    /// The bytes burn reads: the words, then the scales (at a 4-byte boundary, which the words
    /// end on).
    fn into_bytes(self, dtype: ScaleDtype) -> Vec<u8> {
        let mut out: Vec<u8> = Vec::with_capacity(self.words.len() * 4 + self.scales.len() * 4);
        self.words
            .iter()
            .for_each(|w| out.extend_from_slice(&w.to_ne_bytes()));
        match dtype {
            ScaleDtype::F16 => self
                .scales
                .iter()
                .for_each(|&s| out.extend_from_slice(&f16::from_f32(s).to_ne_bytes())),
            _ => self
                .scales
                .iter()
                .for_each(|&s| out.extend_from_slice(&s.to_ne_bytes())),
        }
        out
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube;
#[cfg(all(test, feature = "flex"))]
mod tests;
