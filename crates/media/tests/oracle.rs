//! Preprocessing against transformers (`tests/fixtures/make_image_reference.py`): for each
//! picture and budget, the resized size and token count equal `Gemma4ImageProcessor`'s; the
//! patches' order, flattening and positions equal its own to the value; and the resized pixels
//! equal its default (torchvision) path's and, with the PIL resampler, its PIL path's to the byte
//! (a JPEG within what two decoders allow); measured, printed, bounded.

use std::path::{Path, PathBuf};

use gemma_media::patches::{PATCH, patches};
use gemma_media::picture::Picture;
use gemma_media::resample::resize;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/images")
}

/// The picture the patches were cut from, each put back at its (x, y).
fn reassemble(p: &gemma_media::Patches) -> image::RgbImage {
    let mut out = image::RgbImage::new(p.cols * PATCH, p.rows * PATCH);
    let per = (PATCH * PATCH * 3) as usize;
    for (k, &[x, y]) in p.positions.iter().enumerate() {
        let patch = &p.values[k * per..(k + 1) * per];
        for (i, px) in patch.chunks(3).enumerate() {
            let (r, c) = (i as u32 / PATCH, i as u32 % PATCH);
            let v = |f: f32| (f * 255.0).round() as u8;
            out.put_pixel(
                x * PATCH + c,
                y * PATCH + r,
                image::Rgb([v(px[0]), v(px[1]), v(px[2])]),
            );
        }
    }
    out
}

/// Mean and largest absolute difference, in 0..255 steps.
fn difference(a: &image::RgbImage, b: &image::RgbImage) -> (f64, u8) {
    assert_eq!(a.dimensions(), b.dimensions());
    let (mut sum, mut most) = (0u64, 0u8);
    for (x, y) in a.as_raw().iter().zip(b.as_raw()) {
        let d = x.abs_diff(*y);
        sum += u64::from(d);
        most = most.max(d);
    }
    (sum as f64 / a.as_raw().len() as f64, most)
}

#[test]
fn sizes_tokens_and_pixels_follow_transformers() {
    let listing: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir().join("reference.json")).expect("listing"))
            .expect("json");
    for case in listing.as_array().expect("list") {
        let name = case["picture"].as_str().expect("name");
        let budget = case["budget"].as_u64().expect("budget") as usize;
        let picture = Picture::open(&dir().join(name)).expect("decodes");
        let p = patches(&picture.rgb, budget).expect("a budget");
        let size = [case["size"][0].as_u64(), case["size"][1].as_u64()];
        assert_eq!(
            [Some(u64::from(p.size.0)), Some(u64::from(p.size.1))],
            size,
            "{name} at {budget}"
        );
        assert_eq!(
            Some(p.soft_tokens() as u64),
            case["soft_tokens"].as_u64(),
            "{name}"
        );
        // The default path (torchvision's kernel) through the patches; PIL's resize on its own.
        let ours = reassemble(&p);
        let pil = resize(&picture.rgb, p.size.1, p.size.0);
        for (path, ours) in [("torchvision", &ours), ("pil", &pil)] {
            let theirs = image::open(dir().join(format!("{name}.{budget}.{path}.png")))
                .expect("reference")
                .into_rgb8();
            let (mean, most) = difference(ours, &theirs);
            println!("{name} at {budget}: {path} mean {mean:.3}, max {most}");
            // Each path's arithmetic exactly; a JPEG is decoded by another decoder than
            // libjpeg-turbo (zune-jpeg).
            let bound = if name.ends_with(".jpg") {
                (0.5, 24)
            } else {
                (0.0, 0)
            };
            assert!(
                mean <= bound.0 && most <= bound.1,
                "{name} at {budget} vs {path}: mean {mean}, max {most}"
            );
        }
    }
}

#[test]
fn patch_order_and_positions_are_transformers_own() {
    // The picture transformers fed the tower (already its size: no resize) cut again here.
    let resized = image::open(dir().join("small.png.70.torchvision.png"))
        .expect("reference")
        .into_rgb8();
    let p = patches(&resized, 70).expect("a budget");
    let file = std::fs::read(dir().join("patches.safetensors")).expect("patches");
    let st = safetensors::SafeTensors::deserialize(&file).expect("safetensors");
    let values = st.tensor("pixel_values").expect("values");
    let ours: Vec<u8> = p.values.iter().map(|v| (v * 255.0).round() as u8).collect();
    assert_eq!(values.shape(), [p.count(), 768]);
    assert!(ours == values.data(), "the patches' values or order differ");
    let positions = st.tensor("positions").expect("positions");
    let theirs: Vec<i64> = positions
        .data()
        .chunks(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect();
    let ours: Vec<i64> = p
        .positions
        .iter()
        .flat_map(|&[x, y]| [i64::from(x), i64::from(y)])
        .collect();
    assert_eq!(ours, theirs);
}

/// A PNG that is its header and an empty data chunk: `width × height`, 8-bit RGB, no pixels.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    fn crc(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    for chunk in [ihdr, b"IDAT".to_vec(), b"IEND".to_vec()] {
        png.extend((chunk.len() as u32 - 4).to_be_bytes());
        png.extend(&chunk);
        png.extend(crc(&chunk).to_be_bytes());
    }
    png
}

/// The soft tokens a picture makes, counted from its header alone (what a message's context
/// check uses before any tower runs), are those its decoded patches make, at every budget.
#[test]
fn soft_tokens_from_the_header_are_the_patches_count() {
    for name in [
        "small.png",
        "wide.webp",
        "rotated.jpg",
        "sliver.png",
        "alpha.png",
        "frames.gif",
    ] {
        let bytes = std::fs::read(dir().join(name)).expect("fixture");
        let picture = Picture::decode(&bytes, name).expect("decodes");
        for budget in gemma_media::BUDGETS {
            let want = gemma_media::patches(&picture.rgb, budget)
                .ok()
                .map(|p| p.soft_tokens());
            assert_eq!(
                gemma_media::soft_tokens(&bytes, budget),
                want,
                "{name} at {budget}"
            );
            // The file's head is enough (the engine reads at most a megabyte of it).
            let head = &bytes[..bytes.len().min(16 << 10)];
            assert_eq!(
                gemma_media::soft_tokens(head, budget),
                want,
                "{name} head at {budget}"
            );
        }
    }
}

/// Pictures too large to decode are refused from their header, before any pixel is decoded
/// (a 50,000-pixel side; 20,000 × 16,000, a 1 GB decompression bomb), and a damaged or foreign
/// file says what it is.
#[test]
fn bombs_slivers_and_damage_are_refused_with_a_reason() {
    use gemma_media::PictureError;
    for (w, h) in [(50_000, 10), (10, 50_000), (16_000, 16_000)] {
        match Picture::decode(&png_header(w, h), "bomb.png") {
            Err(e @ PictureError::TooLarge { .. }) => {
                let text = e.to_string();
                // The size its header gives, not 0 × 0 (probe 2026-12-06, F11).
                assert!(
                    text.contains("too large to decode")
                        && text.contains("bomb.png")
                        && text.contains(&format!("{w} × {h} pixels")),
                    "{text}"
                );
            }
            other => panic!("{w}×{h}: {other:?}"),
        }
    }
    let small = std::fs::read(dir().join("small.png")).expect("fixture");
    let e = Picture::decode(&small[..small.len() / 2], "cut.png").expect_err("truncated");
    assert!(
        e.to_string().starts_with("cut.png: the picture is damaged"),
        "{e}"
    );
    let e = Picture::decode(b"just some text, not a picture", "notes.txt").expect_err("text");
    assert_eq!(
        e.to_string(),
        "notes.txt: not a PNG, JPEG, WebP or GIF picture"
    );
}
