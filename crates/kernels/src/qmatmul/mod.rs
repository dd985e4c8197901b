//! Matrix products on the host for weights in their stored GGML type, read in place from the
//! mapped file: every quantized type (Q4_0..Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS) and the float
//! types (F32, F16, BF16, never widened). What the linear layers, the embeddings and the LM head
//! use on the CPU backend, so that a decode step reads the file's bytes and nothing else.
//!
//! For the quantized types the input rows are quantized per 32 values to i16 with an f32 scale
//! ([`QuantRow`]): 15 bits of precision keep the result within about 1e-5 of the dequantized f32
//! product, unlike the int8 activations llama.cpp uses. Each block's dot product is integer
//! arithmetic (`avx2/` where the CPU has it, `scalar*.rs` otherwise, the reference the tests hold
//! it to), scaled once per block in f32. Float weights meet the f32 input with f32 accumulation.
//! Rows of the matrix are split over rayon's threads.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avxvnni;
#[cfg(target_arch = "x86_64")]
mod gemm;
mod input;
mod portable;
mod scalar;
mod scalar_k;
pub mod simd;
mod team;
#[cfg(target_arch = "x86_64")]
mod vnni;

use std::ops::Range;

use std::sync::OnceLock;

use rayon::prelude::*;

pub use self::input::{LANE_ORDER, LO, QuantRow, SUPER};
pub use self::team::team;

use crate::quant::GgmlType;
use crate::{Blocks, Bytes};

/// Values per activation block: one f32 scale each.
pub const BLOCK: usize = 32;

/// A `[rows, cols]` matrix in a GGML type, row-major, each row a whole number of blocks.
#[derive(Clone)]
pub struct QMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: Bytes,
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QMatrix({:?}, {}x{})", self.ty, self.rows, self.cols)
    }
}

impl QMatrix {
    /// Wraps `data`, or `None` when the sizes do not fit whole blocks.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: Bytes) -> Option<Self> {
        if cols == 0 {
            return None;
        }
        let row_bytes = ty.bytes_for(cols)?;
        (data.len() == rows * row_bytes).then_some(Self {
            ty,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// A stored tensor as a matrix: `[rows, cols]`, or `[n, rows, cols]` as `n · rows` rows
    /// (stacked experts, cut apart with [`QMatrix::row_range`]).
    pub fn from_blocks(b: Blocks) -> Option<Self> {
        let (&cols, outer) = b.shape.split_last()?;
        Self::new(b.ty, outer.iter().product(), cols, b.bytes)
    }

    /// Rows `range` as a matrix of their own, sharing the bytes.
    pub fn row_range(&self, range: Range<usize>) -> Self {
        assert!(range.end <= self.rows, "rows outside the matrix");
        Self {
            rows: range.len(),
            data: self
                .data
                .slice(range.start * self.row_bytes..range.end * self.row_bytes),
            ..self.clone()
        }
    }

    /// Whether the bytes are the mapped file's pages, used in place.
    pub fn is_mapped(&self) -> bool {
        self.data.is_mapped()
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The block type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The blocks split into integers, scales and offsets ([`GgmlType::split`]), or `None` for
    /// a float type.
    pub fn split(&self) -> Option<crate::quant::Split> {
        self.ty.split(&self.data)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// The given rows, dequantized to f32, one after the other (`ids.len() × cols`). An
    /// embedding lookup.
    pub fn dequantize_rows(&self, ids: &[usize]) -> Vec<f32> {
        let mut out = vec![0f32; ids.len() * self.cols];
        for (&r, dst) in ids.iter().zip(out.chunks_exact_mut(self.cols)) {
            self.ty.dequantize_into(self.row(r), dst);
        }
        out
    }

    /// Rows `range`, dequantized to f32 (`range.len() × cols`), on every thread.
    pub fn dequantize_range(&self, range: Range<usize>) -> Vec<f32> {
        const ROWS: usize = 16;
        let mut out = vec![0f32; range.len() * self.cols];
        out.par_chunks_mut(self.cols * ROWS)
            .enumerate()
            .for_each(|(i, dst)| {
                let first = range.start + i * ROWS;
                self.dequantize_into(first..first + dst.len() / self.cols, dst);
            });
        out
    }

    /// Rows `range`, dequantized into `dst` (`range.len() × cols` values), on this thread.
    pub fn dequantize_into(&self, range: Range<usize>, dst: &mut [f32]) {
        let bytes = &self.data[range.start * self.row_bytes..range.end * self.row_bytes];
        self.ty.dequantize_into(bytes, dst);
    }

    /// `x · Wᵀ` for many input rows (a prefill) with the packed GEMM: `t × rows` values,
    /// row-major, or `None` where the CPU has neither AVX-512 nor AVX2.
    pub fn gemm(&self, x: &[f32], t: usize) -> Option<Vec<f32>> {
        #[cfg(target_arch = "x86_64")]
        return gemm::gemm(self, x, t);
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (x, t);
            None
        }
    }

    /// `x · Wᵀ` for `t` input rows of `cols` values: `t × rows` values, row-major.
    pub fn matmul(&self, x: &[f32], t: usize) -> Vec<f32> {
        matmul_many(&[self], x, t).pop().unwrap_or_default()
    }
}

/// `x · Wᵀ` for several matrices with the same input (q/k/v, gate/up): the input is quantized
/// once and all their rows share one pass over the [`team`]. One `t × rows` result per matrix.
pub fn matmul_many(ms: &[&QMatrix], x: &[f32], t: usize) -> Vec<Vec<f32>> {
    let Some(cols) = ms.first().map(|m| m.cols) else {
        return Vec::new();
    };
    assert!(
        ms.iter().all(|m| m.cols == cols),
        "matrices differ in columns"
    );
    assert_eq!(x.len(), t * cols, "input is not t × cols");
    // The per-256 form only where a kernel reads it: not on the decode step's other products.
    let wide = ms.iter().any(|m| reads_super(m.ty));
    let lanes = ms.iter().any(|m| reads_lanes(m.ty));
    let xs: Vec<QuantRow> = x
        .chunks_exact(cols)
        .map(|r| QuantRow::with_forms(r, wide, lanes))
        .collect();
    // Work in pieces of whole rows, a few per thread so that a slow core does not hold everyone
    // up; each piece computes its rows' `[rows_in_piece, t]` outputs.
    let team = team();
    let total: usize = ms.iter().map(|m| m.rows).sum();
    let piece = total.div_ceil(team.threads() * 4).clamp(8, 4096);
    let jobs: Vec<(&QMatrix, usize, usize)> = ms
        .iter()
        .flat_map(|&m: &&QMatrix| {
            (0..m.rows)
                .step_by(piece)
                .map(move |first| (m, first, piece.min(m.rows - first)))
        })
        .collect();
    let results: Vec<OnceLock<Vec<f32>>> = (0..jobs.len()).map(|_| OnceLock::new()).collect();
    let (dot, rows) = (kernel(), kernel_rows().filter(|_| t > 1));
    team.run(jobs.len(), &|j| {
        let (m, first, n) = jobs[j];
        let mut out = vec![0f32; n * t];
        for r in interleaved(n) {
            let dst = &mut out[r * t..(r + 1) * t];
            let w = m.row(first + r);
            prefetch(
                &m.data,
                (first + r) * m.row_bytes + PREFETCH_AHEAD,
                m.row_bytes,
            );
            if rows.is_some_and(|f| f(m.ty, w, &xs, dst)) {
                continue;
            }
            for (x, y) in xs.iter().zip(dst.iter_mut()) {
                *y = dot(m.ty, w, x);
            }
        }
        let _ = results[j].set(out);
    });
    let mut pieces = results
        .iter()
        .map(|r| r.get().map_or(&[][..], Vec::as_slice));
    ms.iter()
        .map(|m| {
            let mut rows_first = Vec::with_capacity(m.rows * t);
            while rows_first.len() < m.rows * t {
                match pieces.next() {
                    Some(p) if !p.is_empty() => rows_first.extend_from_slice(p),
                    _ => panic!("a product's piece is missing"),
                }
            }
            if t == 1 {
                return rows_first;
            }
            let mut out = vec![0f32; t * m.rows];
            for (r, ys) in rows_first.chunks_exact(t).enumerate() {
                for (ti, &y) in ys.iter().enumerate() {
                    out[ti * m.rows + r] = y;
                }
            }
            out
        })
        .collect()
}

/// How many parts of a piece's rows a thread walks at once, a row of each in turn
/// ([`interleaved`]). Two sequential streams keep more of the weights' cache misses in flight
/// than one: the demo model decoded at 72 tokens/s instead of 54 (Xeon with AVX-512, 2 threads,
/// medians of four alternated runs), and at 66 instead of 51 capped at AVX2; three streams
/// measured as two, eight slower. Each row's result is the same bits in any order.
const STREAMS: usize = 2;

/// The rows `0..n`, each once, in [`STREAMS`] contiguous parts taken a row of each in turn.
fn interleaved(n: usize) -> impl Iterator<Item = usize> {
    let per = n.div_ceil(STREAMS);
    (0..per * STREAMS)
        .map(move |i| (i % STREAMS) * per + i / STREAMS)
        .filter(move |&r| r < n)
}

/// How far ahead of the row being multiplied its weights are prefetched. Without it a core
/// streamed the mapped weights at 4.4 GB/s, a third of what it reads with nothing else to do:
/// the kernels' work between loads left too few misses in flight. With it the demo model's LM
/// head (170 MB of Q8_0) took 13 ms instead of 20 on two threads; 4–16 KiB measured alike.
const PREFETCH_AHEAD: usize = 4096;

/// Asks for the cache lines of `bytes[from..from + len]` (clipped to `bytes`) ahead of use.
fn prefetch(bytes: &[u8], from: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let end = (from + len).min(bytes.len());
        let mut at = from;
        while at < end {
            // SAFETY: `at < bytes.len()`; a prefetch reads nothing and cannot fault.
            #[allow(unsafe_code)]
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at) as *const i8);
            }
            at += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, from, len);
}

/// Whether a type's kernels may read the inputs' per-256 form ([`QuantRow::q256`]).
fn reads_super(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// Whether a type's kernel at this CPU's level reads the inputs' digits in lane order
/// ([`QuantRow::q_lanes`]): Q5_0 at AVX2 (and AVX-VNNI, which runs AVX2's).
fn reads_lanes(ty: GgmlType) -> bool {
    #[cfg(target_arch = "x86_64")]
    return ty == GgmlType::Q5_0 && avx2::available() && !avx512::available();
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        false
    }
}

/// Whether the prefill GEMM ([`gemm_with`], [`QMatrix::gemm`]) runs on this CPU (AVX-512 or
/// AVX2).
pub fn gemm_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return gemm::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
pub use self::gemm::{Fill, gemm_many, gemm_with};

/// Without x86-64 there is no GEMM ([`gemm_available`] is false): never called.
#[cfg(not(target_arch = "x86_64"))]
pub fn gemm_with(
    _: usize,
    _: usize,
    _: &[f32],
    _: usize,
    _: &(dyn Fn(Range<usize>, &mut [f32]) + Sync),
) -> Vec<f32> {
    panic!("the GEMM needs AVX2 or AVX-512")
}

/// One row of blocks against one quantized input row.
pub type Dot = fn(GgmlType, &[u8], &QuantRow) -> f32;

/// The row kernel this CPU runs best, chosen once per product rather than per row.
pub fn kernel() -> Dot {
    kernels().first().map_or(portable::dot as Dot, |&(_, k)| k)
}

/// One row of blocks against several inputs at once (each block decoded once for them), the
/// same bits as [`Dot`] per input; `false` for a type it does not cover.
pub type DotRows = fn(GgmlType, &[u8], &[QuantRow], &mut [f32]) -> bool;

/// The several-input kernel this CPU runs, where there is one (AVX-512 or AVX2).
pub fn kernel_rows() -> Option<DotRows> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return Some(avx512::dot_rows);
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        return Some(avx2::dot_rows);
    }
    None
}

/// The SIMD row kernels this CPU runs, best first, by name.
pub fn kernels() -> Vec<(&'static str, Dot)> {
    let mut found: Vec<(&'static str, Dot)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if vnni::available() {
            found.push(("avx512-vnni", vnni::dot));
        }
        if avx512::available() {
            found.push(("avx512", avx512::dot));
        }
        if avxvnni::available() {
            found.push(("avx-vnni", avxvnni::dot));
        }
        if avx2::available() {
            found.push(("avx2", avx2::dot));
        }
    }
    found
}

#[cfg(test)]
mod tests;
