//! Bicubic resizing as PIL does it (`Image.resize(…, BICUBIC)`, which transformers' PIL path
//! calls, and which torchvision's antialiased bicubic on 8-bit pictures reproduces): a = −0.5, the
//! kernel widened by the scale when shrinking, weights normalised per output pixel and held in
//! 22-bit fixed point, the width resized first into an 8-bit picture, then the height, each value
//! rounded and clamped. The same arithmetic gives the same bytes.

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

/// For each output position, the first input index and its fixed-point weights.
fn weights(input: u32, output: u32) -> Vec<(usize, Vec<i32>)> {
    let scale = f64::from(input) / f64::from(output);
    let filterscale = scale.max(1.0);
    let support = SUPPORT * filterscale;
    (0..output)
        .map(|o| {
            let center = (f64::from(o) + 0.5) * scale;
            // PIL truncates toward zero here (`(int)`), on values that may be negative.
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64).min(i64::from(input)) as usize;
            let raw: Vec<f64> = (lo..hi)
                .map(|x| cubic((x as f64 - center + 0.5) / filterscale))
                .collect();
            let total: f64 = raw.iter().sum();
            let fixed = raw
                .iter()
                .map(|w| {
                    let w = if total == 0.0 { 0.0 } else { w / total };
                    let v = w * f64::from(1u32 << PRECISION);
                    (if v < 0.0 { v - 0.5 } else { v + 0.5 }) as i32
                })
                .collect();
            (lo, fixed)
        })
        .collect()
}

/// One weighted sum, rounded and clamped to a byte.
fn apply(taps: &[i32], values: impl Iterator<Item = u8>) -> u8 {
    let mut sum: i64 = 1 << (PRECISION - 1);
    for (w, v) in taps.iter().zip(values) {
        sum += i64::from(*w) * i64::from(v);
    }
    (sum >> PRECISION).clamp(0, 255) as u8
}

/// `src` resized to `width × height`: the width first, then the height.
pub fn resize(src: &RgbImage, width: u32, height: u32) -> RgbImage {
    let wide = if width == src.width() {
        src.clone()
    } else {
        pass(src, width, true)
    };
    if height == wide.height() {
        return wide;
    }
    pass(&wide, height, false)
}

/// One direction of the resize: `src` with its width (`along_x`) or its height made `size`.
fn pass(src: &RgbImage, size: u32, along_x: bool) -> RgbImage {
    let (w, h) = src.dimensions();
    let (taps, out_w, out_h) = if along_x {
        (weights(w, size), size, h)
    } else {
        (weights(h, size), w, size)
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
        let px = |c: usize| apply(taps, (0..taps.len()).map(|i| at(i).0[c]));
        image::Rgb([px(0), px(1), px(2)])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_a_flat_picture_stays_flat() {
        for (i, o) in [(100, 37), (37, 100), (5, 5), (1, 9), (3000, 48)] {
            for (_, taps) in weights(i, o) {
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
