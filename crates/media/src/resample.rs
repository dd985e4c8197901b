//! Antialiased bicubic resizing as transformers' two image paths do it. Both use a = −0.5, the
//! kernel widened by the scale when shrinking, weights normalised per output pixel (in f64) then
//! held in fixed point, the width resized first into an 8-bit picture, then the height, each
//! value rounded and clamped. They differ in the fixed point only:
//! - [`resize_torch`], the default (torchvision) path that `Gemma4ImageProcessor` and the 12B's
//!   processor run: PyTorch's 8-bit kernel (`_upsample_bicubic2d_aa` on `uint8`), with int16
//!   weights whose precision is the most bits the pass's largest weight allows;
//! - [`resize`], the PIL path (`Image.resize(…, BICUBIC)`): 22-bit weights.
//!
//! The same arithmetic gives the same bytes.

use image::RgbImage;

/// Fixed-point bits of a weight (PIL's `PRECISION_BITS`).
const PRECISION: u32 = 32 - 8 - 2;
/// The cubic's reach at scale 1.
const SUPPORT: f64 = 2.0;

/// PIL's bicubic kernel, a = −0.5.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// For each output position, the first input index and its normalised weights: `x / scale`
/// (PIL) or `x · (1 / scale)` (PyTorch) inside the kernel.
fn weights(input: u32, output: u32, torch: bool) -> Vec<(usize, Vec<f64>)> {
    let scale = f64::from(input) / f64::from(output);
    let filterscale = scale.max(1.0);
    let support = SUPPORT * filterscale;
    let inv = 1.0 / filterscale;
    (0..output)
        .map(|o| {
            let center = (f64::from(o) + 0.5) * scale;
            // Both truncate toward zero here, on values that may be negative.
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64).min(i64::from(input)) as usize;
            let raw: Vec<f64> = (lo..hi)
                .map(|x| {
                    let d = x as f64 - center + 0.5;
                    cubic(if torch { d * inv } else { d / filterscale })
                })
                .collect();
            let total: f64 = raw.iter().sum();
            let w = raw
                .iter()
                .map(|w| if total == 0.0 { 0.0 } else { w / total })
                .collect();
            (lo, w)
        })
        .collect()
}

/// The weights in fixed point of `bits` bits, rounded half away from zero.
fn fixed(ws: Vec<(usize, Vec<f64>)>, bits: u32) -> Vec<(usize, Vec<i32>)> {
    ws.into_iter()
        .map(|(lo, w)| {
            let f = w
                .iter()
                .map(|w| {
                    let v = w * f64::from(1u32 << bits);
                    (if v < 0.0 { v - 0.5 } else { v + 0.5 }) as i32
                })
                .collect();
            (lo, f)
        })
        .collect()
}

/// PyTorch's int16 precision for a pass: the most bits (below 22) at which twice the largest
/// weight still fits in 15.
fn torch_bits(ws: &[(usize, Vec<f64>)]) -> u32 {
    let max = ws
        .iter()
        .flat_map(|(_, w)| w.iter().copied())
        .fold(0.0f64, f64::max);
    let mut bits = 0;
    while bits < 22 && ((0.5 + max * f64::from(1u32 << (bits + 1))) as i64) < (1 << 15) {
        bits += 1;
    }
    bits
}

/// A pass's taps and their precision.
fn taps(input: u32, output: u32, torch: bool) -> (Vec<(usize, Vec<i32>)>, u32) {
    let ws = weights(input, output, torch);
    let bits = if torch { torch_bits(&ws) } else { PRECISION };
    (fixed(ws, bits), bits)
}

/// One weighted sum, rounded and clamped to a byte.
fn apply(taps: &[i32], bits: u32, values: impl Iterator<Item = u8>) -> u8 {
    let mut sum: i64 = 1 << bits.saturating_sub(1);
    for (w, v) in taps.iter().zip(values) {
        sum += i64::from(*w) * i64::from(v);
    }
    (sum >> bits).clamp(0, 255) as u8
}

/// `src` resized to `width × height` as PIL resizes it: the width first, then the height.
pub fn resize(src: &RgbImage, width: u32, height: u32) -> RgbImage {
    resize_with(src, width, height, false)
}

/// `src` resized to `width × height` as torchvision resizes an 8-bit picture (PyTorch's kernel).
pub fn resize_torch(src: &RgbImage, width: u32, height: u32) -> RgbImage {
    resize_with(src, width, height, true)
}

fn resize_with(src: &RgbImage, width: u32, height: u32, torch: bool) -> RgbImage {
    let wide = if width == src.width() {
        src.clone()
    } else {
        pass(src, width, true, torch)
    };
    if height == wide.height() {
        return wide;
    }
    pass(&wide, height, false, torch)
}

/// One direction of the resize: `src` with its width (`along_x`) or its height made `size`.
fn pass(src: &RgbImage, size: u32, along_x: bool, torch: bool) -> RgbImage {
    let (w, h) = src.dimensions();
    let ((taps, bits), out_w, out_h) = if along_x {
        (taps(w, size, torch), size, h)
    } else {
        (taps(h, size, torch), w, size)
    };
    RgbImage::from_fn(out_w, out_h, |x, y| {
        let (lo, taps) = &taps[if along_x { x } else { y } as usize];
        let at = |i: usize| {
            let i = (lo + i) as u32;
            if along_x {
                src.get_pixel(i, y)
            } else {
                src.get_pixel(x, i)
            }
        };
        let px = |c: usize| apply(taps, bits, (0..taps.len()).map(|i| at(i).0[c]));
        image::Rgb([px(0), px(1), px(2)])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_a_flat_picture_stays_flat() {
        for (i, o) in [(100, 37), (37, 100), (5, 5), (1, 9), (3000, 48)] {
            for (_, taps) in taps(i, o, false).0 {
                let sum: i64 = taps.iter().map(|&t| i64::from(t)).sum();
                assert!(
                    (sum - (1 << PRECISION)).abs() <= taps.len() as i64,
                    "{i}→{o}"
                );
            }
        }
        let flat = RgbImage::from_pixel(50, 30, image::Rgb([10, 200, 77]));
        let out = resize(&flat, 96, 17);
        assert!(out.pixels().all(|p| p.0 == [10, 200, 77]));
    }
}
