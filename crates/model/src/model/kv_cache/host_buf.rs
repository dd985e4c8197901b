//! One host layer's keys or values in its [`KvDtype`], position-major `[len, heads, dim]` (a
//! position's heads contiguous) with spare capacity, and [`Rows`], the borrowed view attention
//! reads, widened to f32 a row at a time. Appends convert once; nothing here knows positions'
//! meaning (that is `layer.rs`).

use std::ops::Range;

use burn::tensor::TensorData;
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::dtype::{BlockQ8, KvDtype, KvLayout, Q8_BLOCK, Q8_BYTES, f16_to_f32};
use gemma_kernels::vmath;

/// A host layer's keys (or values), `values()` of them.
#[derive(Debug, Clone)]
pub(crate) enum HostBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// One block per 32 values.
    Q8(Vec<BlockQ8>),
}

/// Borrowed keys or values of a host layer, indexed by value (a q8_0 block holds 32).
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// Plain f32.
    F32(&'a [f32]),
    /// Half precision.
    F16(&'a [f16]),
    /// q8_0 blocks.
    Q8(&'a [BlockQ8]),
}

impl<'a> Rows<'a> {
    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(x) => x.len(),
            Rows::F16(x) => x.len(),
            Rows::Q8(x) => x.len() * Q8_BLOCK,
        }
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values `at..at + n` as f32: the slice itself when stored in f32, else widened into
    /// `buf` (at least `n` long). For q8_0, `at` and `n` are whole blocks (heads are).
    /// Plain loops, inlined, so that the SIMD callers vectorize the widening.
    #[inline(always)]
    pub fn read<'b>(&self, at: usize, n: usize, buf: &'b mut [f32]) -> &'b [f32]
    where
        'a: 'b,
    {
        match *self {
            Rows::F32(x) => &x[at..at + n],
            Rows::F16(x) => {
                let dst = &mut buf[..n];
                vmath::widen_f16(x[at..at + n].reinterpret_cast(), dst);
                dst
            }
            Rows::Q8(x) => {
                let dst = &mut buf[..n];
                let blocks = &x[at / Q8_BLOCK..(at + n) / Q8_BLOCK];
                for (b, d) in blocks.iter().zip(dst.chunks_exact_mut(Q8_BLOCK)) {
                    let scale = f16_to_f32(b.d.to_bits());
                    // The block's values copied out first: with them read through the
                    // reference between the stores, the widening stayed 32 scalar conversions.
                    let qs = b.qs;
                    for (o, &q) in d.iter_mut().zip(&qs) {
                        *o = q as f32 * scale;
                    }
                }
                dst
            }
        }
    }

    /// Values `at..at + dst.len()` as f32 into `dst` (whole blocks for q8_0).
    pub fn read_into(&self, at: usize, dst: &mut [f32]) {
        match self {
            Rows::F32(x) => dst.copy_from_slice(&x[at..at + dst.len()]),
            _ => {
                self.read(at, dst.len(), dst);
            }
        }
    }

    /// Value `i` as f32.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Rows::F32(x) => x[i],
            Rows::F16(x) => x[i].to_f32(),
            Rows::Q8(x) => {
                let b = &x[i / Q8_BLOCK];
                b.qs[i % Q8_BLOCK] as f32 * b.d.to_f32()
            }
        }
    }
}

/// `[b, a, unit]` from `[a, b, unit]`.
fn transpose<T: Copy>(src: &[T], a: usize, b: usize, unit: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(src.len());
    for j in 0..b {
        for i in 0..a {
            let from = (i * b + j) * unit;
            out.extend_from_slice(&src[from..from + unit]);
        }
    }
    out
}

fn grow<T>(buf: &mut Vec<T>, extra: usize) {
    let need = buf.len() + extra;
    if need > buf.capacity() {
        // A quarter to spare: amortised appends without doubling a long history's memory.
        buf.reserve_exact(need + need / 4 - buf.len());
    }
}

impl HostBuf {
    /// An empty buffer of type `t` (already fitted to the layer's head width).
    pub(crate) fn new(t: KvDtype) -> Self {
        match t {
            KvDtype::F32 => HostBuf::F32(Vec::new()),
            KvDtype::F16 => HostBuf::F16(Vec::new()),
            KvDtype::Q8_0 => HostBuf::Q8(Vec::new()),
        }
    }

    /// The values, borrowed.
    pub(crate) fn rows(&self) -> Rows<'_> {
        match self {
            HostBuf::F32(x) => Rows::F32(x),
            HostBuf::F16(x) => Rows::F16(x),
            HostBuf::Q8(x) => Rows::Q8(x),
        }
    }

    /// Bytes of the values held (not the spare capacity).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            HostBuf::F32(x) => x.len() * 4,
            HostBuf::F16(x) => x.len() * 2,
            HostBuf::Q8(x) => x.len() * Q8_BYTES,
        }
    }

    /// Appends `x`, converted (a whole number of q8_0 blocks for q8_0).
    pub(crate) fn push(&mut self, x: &[f32]) {
        match self {
            HostBuf::F32(b) => {
                grow(b, x.len());
                b.extend_from_slice(x);
            }
            HostBuf::F16(b) => {
                grow(b, x.len());
                let at = b.len();
                b.resize(at + x.len(), f16::ZERO);
                b[at..].convert_from_f32_slice(x);
            }
            HostBuf::Q8(b) => {
                assert!(x.len().is_multiple_of(Q8_BLOCK), "whole q8_0 blocks");
                grow(b, x.len() / Q8_BLOCK);
                b.extend(x.chunks_exact(Q8_BLOCK).map(BlockQ8::quantize));
            }
        }
    }

    /// Keeps the first `values`.
    pub(crate) fn truncate(&mut self, values: usize) {
        match self {
            HostBuf::F32(b) => b.truncate(values),
            HostBuf::F16(b) => b.truncate(values),
            HostBuf::Q8(b) => b.truncate(values / Q8_BLOCK),
        }
    }

    /// Drops the first `values`.
    pub(crate) fn drop_front(&mut self, values: usize) {
        match self {
            HostBuf::F32(b) => drop(b.drain(..values)),
            HostBuf::F16(b) => drop(b.drain(..values)),
            HostBuf::Q8(b) => drop(b.drain(..values / Q8_BLOCK)),
        }
    }

    /// Values `range` widened to f32.
    pub(crate) fn to_f32(&self, range: Range<usize>) -> Vec<f32> {
        let mut out = vec![0f32; range.len()];
        self.rows().read_into(range.start, &mut out);
        out
    }

    /// Positions `range` as `[heads, n, width]` data in the stored type, exact: f32 or f16
    /// values, or q8_0 blocks as bytes ([`KvDtype::stored`]).
    pub(crate) fn to_data(&self, range: Range<usize>, heads: usize, dim: usize) -> TensorData {
        let (n, per) = (range.len(), heads * dim);
        let values = range.start * per..range.end * per;
        match self {
            HostBuf::F32(x) => {
                TensorData::new(transpose(&x[values], n, heads, dim), [heads, n, dim])
            }
            HostBuf::F16(x) => {
                TensorData::new(transpose(&x[values], n, heads, dim), [heads, n, dim])
            }
            HostBuf::Q8(x) => {
                let unit = dim / Q8_BLOCK;
                let blocks = &x[values.start / Q8_BLOCK..values.end / Q8_BLOCK];
                let mut bytes = Vec::with_capacity(blocks.len() * Q8_BYTES);
                for b in transpose(blocks, n, heads, unit) {
                    b.to_bytes(&mut bytes);
                }
                TensorData::new(bytes, [heads, n, unit * Q8_BYTES])
            }
        }
    }

    /// A buffer of type `t` from [`HostBuf::to_data`]'s `[heads, len, width]`; `None` when the
    /// data is not that type or shape.
    pub(crate) fn from_data(t: KvDtype, data: TensorData, dim: usize) -> Option<Self> {
        let (want, width) = t.stored(dim);
        let shape = data.shape().to_vec();
        if data.dtype() != want || shape.len() != 3 || shape[2] != width {
            return None;
        }
        let (heads, len) = (shape[0], shape[1]);
        Some(match t.for_dim(dim) {
            KvDtype::F32 => HostBuf::F32(transpose(
                &data.try_into_vec::<f32>().ok()?,
                heads,
                len,
                dim,
            )),
            KvDtype::F16 => HostBuf::F16(transpose(
                &data.try_into_vec::<f16>().ok()?,
                heads,
                len,
                dim,
            )),
            KvDtype::Q8_0 => {
                let bytes = data.try_into_vec::<u8>().ok()?;
                let blocks: Vec<BlockQ8> = bytes
                    .chunks_exact(Q8_BYTES)
                    .map(BlockQ8::from_bytes)
                    .collect();
                HostBuf::Q8(transpose(&blocks, heads, len, dim / Q8_BLOCK))
            }
        })
    }
}
