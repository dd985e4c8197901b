//! The block kernels of a quantized weight on a CubeCL device (wgpu, CUDA): a fused
//! matrix–vector product for a few input rows (a decode step, as llama.cpp's MMVQ), reading the
//! packed integer codes and their scales straight from burn's block-scaled tensor, and a
//! dequantization into the compute dtype for burn's dense matmul (a prefill, as llama.cpp's
//! dequantize-then-GEMM). Neither asks for more than 1 KiB of workgroup memory, so both run on
//! every adapter (burn's own block-scaled matmul wants 68–72 KiB, more than NVIDIA's Vulkan gives).
// Raw buffer arguments and unchecked launches: CubeCL's kernel API, each with its reason beside it.
#![allow(unsafe_code)]

use std::ops::Range;

use burn::backend::{BackendTensor, Cube, DispatchTensorKind};
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::cubecl::ir::{ElemType, FloatKind};
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::cubecl::{self, calculate_cube_count_elemwise};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;

/// Units that share one weight row in [`block_matvec`].
const LANES: usize = 32;
/// Weight rows one cube of [`block_matvec`] computes.
const ROWS_PER_CUBE: usize = 8;
/// Values per dequantized tile of a prefill's weight: 64 MiB in f32, within every adapter's
/// largest buffer (lavapipe's and WebGPU's 128 MiB among them).
#[cfg(not(test))]
const DENSE_TILE: usize = 1 << 24;
/// Small enough that the unit tests' matrices take several tiles.
#[cfg(test)]
const DENSE_TILE: usize = 1 << 12;
/// Vulkan's (and WebGPU's) least guaranteed cube count along one axis.
const MAX_CUBES_X: usize = 65_535;

/// The integer codes and scales of a block-scaled weight on a CubeCL device.
#[derive(Clone, Debug)]
pub struct Blocks {
    words: CubeTensor,
    scales: CubeTensor,
    rows: usize,
    cols: usize,
    bits: u32,
    sub: usize,
}

impl Blocks {
    /// The codes and scales of `weight` (`[rows, cols]`, burn's `Q4F`/`Q8F` packed in u32 along
    /// the rows, one scale per `sub` values), or `None` where it is not a CubeCL tensor.
    pub fn of(weight: &Tensor<2>, bits: u32, sub: usize) -> Option<Self> {
        let [rows, cols] = weight.dims();
        let DispatchTensorKind::Cube(BackendTensor::Quantized(q)) =
            weight.clone().into_dispatch().kind
        else {
            return None;
        };
        let (words, scales) = q.quantized_handles()?;
        Some(Self {
            words,
            scales,
            rows,
            cols,
            bits,
            sub,
        })
    }

    fn dtypes(&self, out: DType) -> [ElemType; 2] {
        [elem(out), elem(self.scales.dtype)]
    }

    /// `x · Wᵀ` for a few rows of `x` (`[T, cols]` → `[T, rows]`), in one pass over the codes.
    pub fn matvec(&self, x: Tensor<2>) -> Tensor<2> {
        let [t, k] = x.dims();
        assert_eq!(k, self.cols, "input width against the weight's");
        let x = into_contiguous(x.try_into_primitive::<Cube>().expect("a CubeCL tensor"));
        let dtype = x.dtype;
        let client = x.client.clone();
        let out = empty_device_dtype(
            client.clone(),
            x.device.clone(),
            Shape::new([t, self.rows]),
            dtype,
        );
        let cubes = self.rows.div_ceil(ROWS_PER_CUBE);
        let along_x = cubes.min(MAX_CUBES_X);
        let count = CubeCount::Static(along_x as u32, cubes.div_ceil(along_x) as u32, 1);
        let dim = CubeDim::new_2d(LANES as u32, ROWS_PER_CUBE as u32);
        // SAFETY: every index the kernel forms is below the length given for its buffer: the
        // rows it writes are checked against `rows`, and the words, scales and inputs it reads
        // are those of rows below `rows` and columns below `cols`.
        unsafe {
            block_matvec::launch_unchecked(
                &client,
                count,
                dim,
                BufferArg::from_raw_parts(x.handle.clone(), t * k),
                self.words_arg(),
                self.scales_arg(),
                BufferArg::from_raw_parts(out.handle.clone(), t * self.rows),
                self.rows,
                self.cols,
                t,
                self.bits,
                self.sub,
                self.dtypes(dtype),
            );
        }
        Tensor::from_primitive::<Cube>(out)
    }

    /// `x · Wᵀ` for many rows of `x` (`[T, cols]` → `[T, rows]`): the weight dequantized into
    /// `x`'s dtype a tile of rows at a time (at most [`DENSE_TILE`] values, within every
    /// adapter's largest buffer), each tile through burn's dense matmul.
    pub fn matmul(&self, x: Tensor<2>) -> Tensor<2> {
        let tile = (DENSE_TILE / self.cols).max(1);
        let mut parts: Vec<Tensor<2>> = (0..self.rows)
            .step_by(tile)
            .map(|from| {
                let w = self.dequantize(from..(from + tile).min(self.rows), x.dtype());
                x.clone().matmul(w.t())
            })
            .collect();
        if parts.len() == 1 {
            parts.remove(0)
        } else {
            Tensor::cat(parts, 1)
        }
    }

    /// Rows `range` of the weight in `dtype`, `[range.len(), cols]`.
    pub fn dequantize(&self, range: Range<usize>, dtype: DType) -> Tensor<2> {
        let client = self.words.client.clone();
        let values = range.len() * self.cols;
        let out = empty_device_dtype(
            client.clone(),
            self.words.device.clone(),
            Shape::new([range.len(), self.cols]),
            dtype,
        );
        let per_word = 32 / self.bits as usize;
        let words = values / per_word;
        let dim = CubeDim::new(&client, words);
        let count = calculate_cube_count_elemwise(&client, words, dim);
        // SAFETY: units past the tile's last word return before reading; a word's values and
        // scale lie in the matrix's `rows · cols` values and `rows · cols / sub` scales, and its
        // output in the tile's `values`.
        unsafe {
            dequantize_blocks::launch_unchecked(
                &client,
                count,
                dim,
                self.words_arg(),
                self.scales_arg(),
                BufferArg::from_raw_parts(out.handle.clone(), values),
                range.start * self.cols / per_word,
                words,
                self.bits,
                self.sub,
                self.dtypes(dtype),
            );
        }
        Tensor::from_primitive::<Cube>(out)
    }

    fn words_arg(&self) -> BufferArg {
        let len = self.words.meta.num_elements();
        // SAFETY: the handle holds `len` u32 words (burn's own view of the packed codes).
        unsafe { BufferArg::from_raw_parts(self.words.handle.clone(), len) }
    }

    fn scales_arg(&self) -> BufferArg {
        let len = self.scales.meta.num_elements();
        // SAFETY: the handle holds `len` scales of the scales' dtype.
        unsafe { BufferArg::from_raw_parts(self.scales.handle.clone(), len) }
    }
}

/// The CubeCL element of a float dtype the kernels take.
fn elem(dtype: DType) -> ElemType {
    ElemType::Float(match dtype {
        DType::F16 => FloatKind::F16,
        DType::BF16 => FloatKind::BF16,
        DType::F32 | DType::Flex32 => FloatKind::F32,
        other => panic!("no block kernel for {other:?}"),
    })
}

// Both kernels decode code `j` of a word inline, by division and remainder by powers of two
// (shifts once compiled): in CubeCL 0.11 a shift by a comptime amount, and a `#[cube]` helper
// taking the word, fail the IR verifier ("Expected operand type cube.ptr, but found cube.index").

/// `out[t, r] = Σ_c x[t, c] · scale[r, c / sub] · code[r, c]`: `LANES` units walk a row's words
/// and sum in workgroup memory, `ROWS_PER_CUBE` rows a cube, every input row in turn (the
/// weight row stays in cache between them).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn block_matvec<F: Float, S: Float>(
    x: &[F],
    words: &[u32],
    scales: &[S],
    out: &mut [F],
    rows: usize,
    cols: usize,
    tokens: usize,
    #[comptime] bits: u32,
    #[comptime] sub: usize,
    #[define(F, S)] _dtypes: [ElemType; 2],
) {
    let per_word = comptime!(32 / bits);
    let lane = UNIT_POS_X as usize;
    let cube = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
    let row = cube * ROWS_PER_CUBE + UNIT_POS_Y as usize;
    let slot = UNIT_POS_Y as usize * LANES + lane;
    let mut partial = Shared::<[f32]>::new_slice(comptime!(LANES * ROWS_PER_CUBE));
    let words_per_row = cols / per_word as usize;
    for t in 0..tokens {
        let mut acc = 0.0f32;
        if row < rows {
            for w in range_stepped(lane, words_per_row, LANES) {
                let word = words[row * words_per_row + w];
                let col = w * per_word as usize;
                let base = t * cols + col;
                let mut dot = 0.0f32;
                #[unroll]
                for j in 0..per_word {
                    let n = (word / comptime!(1u32 << (j * bits))) % comptime!(1u32 << bits);
                    let q = f32::cast_from(n)
                        - f32::cast_from(
                            (n / comptime!(1u32 << (bits - 1))) * comptime!(1u32 << bits),
                        );
                    dot += q * f32::cast_from(x[base + j as usize]);
                }
                acc += dot * f32::cast_from(scales[(row * cols + col) / sub]);
            }
        }
        partial[slot] = acc;
        sync_cube();
        // The row's first unit sums its lanes: 32 reads of workgroup memory against the row's
        // words from global memory.
        if lane == 0 && row < rows {
            let mut sum = 0.0f32;
            for i in 0..LANES {
                sum += partial[slot + i];
            }
            out[t * rows + row] = F::cast_from(sum);
        }
        sync_cube();
    }
}

/// `out[i] = scale[(i + s) / sub] · code[i + s]` over `count` words of a matrix's values from
/// word `skip` on (`s` values), one packed word a unit.
#[cube(launch_unchecked)]
fn dequantize_blocks<F: Float, S: Float>(
    words: &[u32],
    scales: &[S],
    out: &mut [F],
    skip: usize,
    count: usize,
    #[comptime] bits: u32,
    #[comptime] sub: usize,
    #[define(F, S)] _dtypes: [ElemType; 2],
) {
    let w = ABSOLUTE_POS;
    if w < count {
        let per_word = comptime!(32 / bits);
        let word = words[skip + w];
        let first = w * per_word as usize;
        let scale = f32::cast_from(scales[(skip * per_word as usize + first) / sub]);
        #[unroll]
        for j in 0..per_word {
            let n = (word / comptime!(1u32 << (j * bits))) % comptime!(1u32 << bits);
            let q = f32::cast_from(n)
                - f32::cast_from((n / comptime!(1u32 << (bits - 1))) * comptime!(1u32 << bits));
            out[first + j as usize] = F::cast_from(q * scale);
        }
    }
}
