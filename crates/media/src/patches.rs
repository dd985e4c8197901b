//! A picture as Gemma 4's vision towers take it (transformers' `Gemma4ImageProcessor`): resized,
//! aspect preserved, to the largest size whose 16-pixel patches fit the token budget with both
//! sides multiples of 48 (pooling 3 × patch 16); values rescaled by 1/255 with no mean or std;
//! cut into patches row by row, each flattened as (row in patch, column in patch, channel), with
//! its position (x = column, y = row). The resampler is the one transformers' default
//! (torchvision) processors run, PyTorch's 8-bit antialiased bicubic, to the byte
//! ([`crate::resample::resize_torch`]; PIL's, for its PIL path, is [`crate::resample::resize`]).

use image::RgbImage;

use crate::resample::resize_torch;

/// Pixels a patch side.
pub const PATCH: u32 = 16;
/// Patches a pooled soft token side.
pub const POOL: u32 = 3;
/// The soft-token budgets Gemma 4 was trained with.
pub const BUDGETS: [usize; 5] = [70, 140, 280, 560, 1120];

/// A budget Gemma 4 does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an image budget of {0} tokens is not one Gemma 4 takes: use 70, 140, 280, 560 or 1120")]
pub struct BadBudget(pub usize);

/// A picture's patches, ready for the tower.
#[derive(Debug, Clone, PartialEq)]
pub struct Patches {
    /// `count × PATCH² × 3` values in [0, 1], patch after patch.
    pub values: Vec<f32>,
    /// Each patch's (x, y) in patches.
    pub positions: Vec<[u32; 2]>,
    /// Patch rows and columns.
    pub rows: u32,
    /// Patch columns.
    pub cols: u32,
    /// The resized picture's height and width in pixels.
    pub size: (u32, u32),
    /// Pixels a patch side: [`PATCH`] for the ViT towers, `PATCH · POOL` for the 12B's
    /// encoder-free embedder, which takes one 48-pixel patch per soft token.
    pub side: u32,
}

impl Patches {
    /// How many patches.
    pub fn count(&self) -> usize {
        self.positions.len()
    }

    /// Soft tokens the tower makes of them (one per pooled 3 × 3 block of 16-pixel patches, one
    /// per 48-pixel patch).
    pub fn soft_tokens(&self) -> usize {
        if self.side == PATCH {
            self.count() / (POOL * POOL) as usize
        } else {
            self.count()
        }
    }
}

/// The size (height, width) `height × width` is resized to for `budget` soft tokens
/// (`get_aspect_ratio_preserving_size`), `None` when the picture is too thin to fit at all.
pub fn fit(height: u32, width: u32, budget: usize) -> Option<(u32, u32)> {
    let max_patches = (budget * (POOL * POOL) as usize) as f64;
    let side = f64::from(PATCH * POOL);
    let (h, w) = (f64::from(height.max(1)), f64::from(width.max(1)));
    let factor = (max_patches * f64::from(PATCH * PATCH) / (h * w)).sqrt();
    let mut th = ((factor * h) / side).floor() * side;
    let mut tw = ((factor * w) / side).floor() * side;
    // `max_patches // pooling²` soft tokens in one row of 48-pixel blocks.
    let longest = budget as f64 * side;
    match (th == 0.0, tw == 0.0) {
        (true, true) => return None,
        (true, false) => {
            th = side;
            tw = ((w / h).floor() * side).min(longest);
        }
        (false, true) => {
            tw = side;
            th = ((h / w).floor() * side).min(longest);
        }
        (false, false) => {}
    }
    (th * tw <= max_patches * f64::from(PATCH * PATCH) && th > 0.0 && tw > 0.0)
        .then_some((th as u32, tw as u32))
}

/// The picture's 16-pixel patches for `budget` soft tokens, as the ViT towers take them.
pub fn patches(rgb: &RgbImage, budget: usize) -> Result<Patches, BadBudget> {
    patches_of(rgb, budget, PATCH)
}

/// The picture's patches of `side` pixels ([`PATCH`], or `PATCH · POOL` for the 12B's embedder,
/// whose processor merges each 3 × 3 block of 16-pixel patches into one: the same values as a
/// 48-pixel patch, (row, column, channel), at the block's position) for `budget` soft tokens.
pub fn patches_of(rgb: &RgbImage, budget: usize, side: u32) -> Result<Patches, BadBudget> {
    if !BUDGETS.contains(&budget) {
        return Err(BadBudget(budget));
    }
    let (width, height) = rgb.dimensions();
    let (th, tw) = fit(height, width, budget).unwrap_or((PATCH * POOL, PATCH * POOL));
    if (th, tw) == (height, width) {
        return Ok(cut(rgb, side));
    }
    Ok(cut(&resize_torch(rgb, tw, th), side))
}

/// `image` (sides multiples of `side`) cut into patches of `side` pixels.
fn cut(image: &RgbImage, side: u32) -> Patches {
    let (tw, th) = image.dimensions();
    let (rows, cols) = (th / side, tw / side);
    let per = (side * side * 3) as usize;
    let mut values = Vec::with_capacity((rows * cols) as usize * per);
    let mut positions = Vec::with_capacity((rows * cols) as usize);
    for pr in 0..rows {
        for pc in 0..cols {
            for y in 0..side {
                for x in 0..side {
                    let p = image.get_pixel(pc * side + x, pr * side + y).0;
                    values.extend(p.iter().map(|&c| f32::from(c) / 255.0));
                }
            }
            positions.push([pc, pr]);
        }
    }
    Patches {
        values,
        positions,
        rows,
        cols,
        size: (th, tw),
        side,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fit_the_budget_in_multiples_of_48() {
        for budget in BUDGETS {
            for (h, w) in [
                (768, 1024),
                (1080, 1920),
                (1, 5000),
                (5000, 1),
                (48, 48),
                (333, 777),
            ] {
                let Some((th, tw)) = fit(h, w, budget) else {
                    continue;
                };
                assert_eq!((th % 48, tw % 48), (0, 0), "{h}×{w} at {budget}");
                assert!(
                    (th / 16) * (tw / 16) <= budget as u32 * 9,
                    "{h}×{w} at {budget}"
                );
            }
        }
        // transformers' `get_aspect_ratio_preserving_size` for these.
        assert_eq!(fit(768, 1024, 70), Some((336, 432)));
        assert_eq!(fit(768, 1024, 280), Some((672, 912)));
        assert_eq!(fit(1080, 1920, 1120), Some((1200, 2112)));
        assert_eq!(fit(333, 777, 280), Some((480, 1200)));
        // A sliver: one 48-pixel row, as long as the budget allows.
        assert_eq!(fit(10, 100_000, 280), Some((48, 13440)));
        assert_eq!(fit(100_000, 10, 70), Some((3360, 48)));
    }

    #[test]
    fn patches_are_row_major_with_x_y_positions() {
        let img = RgbImage::from_fn(96, 48, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let p = cut(&img, PATCH);
        assert_eq!((p.rows, p.cols, p.count(), p.soft_tokens()), (3, 6, 18, 2));
        assert_eq!(p.positions[1], [1, 0]);
        assert_eq!(p.positions[6], [0, 1]);
        // Patch 1, its second row, third column: pixel (16 + 2, 1).
        let at = 768 + (16 + 2) * 3;
        assert_eq!(
            &p.values[at..at + 3],
            &[18.0 / 255.0, 1.0 / 255.0, 7.0 / 255.0]
        );
        assert_eq!(patches(&img, 100), Err(BadBudget(100)));
        // A small picture is scaled up to fill the budget, as transformers does.
        let p = patches(&img, 70).expect("a budget");
        assert_eq!(p.size, (240, 528));
        // The 12B's merged patches: one per 48-pixel block, its rows whole.
        let m = patches_of(&img, 70, PATCH * POOL).expect("a budget");
        assert_eq!(
            (m.rows, m.cols, m.count(), m.soft_tokens()),
            (5, 11, 55, 55)
        );
        assert_eq!(m.soft_tokens(), p.soft_tokens());
        assert_eq!(m.positions[12], [1, 1]);
    }
}
