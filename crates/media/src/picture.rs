//! A picture file decoded as a vision tower's processor takes it: PNG, JPEG, WebP or GIF (its
//! first frame) through the `image` crate, its EXIF orientation applied, 8-bit RGB with any
//! alpha channel dropped (as transformers' `load_image` converts a file, and llama.cpp's loader
//! too: the colour under a transparent pixel is what the model sees). The header is read first: a
//! side over [`MAX_SIDE`], more than [`MAX_PIXELS`] pixels (a decompression bomb) or a file over
//! [`MAX_FILE`] is refused before anything is decoded into memory.

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, RgbImage};

/// Longest side decoded, in pixels (a 50,000-pixel side is refused unread).
pub const MAX_SIDE: u32 = 16_384;
/// Most pixels decoded (about 8,000 × 8,000).
pub const MAX_PIXELS: u64 = 64 << 20;
/// Largest picture file read.
pub const MAX_FILE: u64 = 64 << 20;
/// Most memory a decoder may take.
const MAX_ALLOC: u64 = 1 << 30;

/// A picture that cannot be used, and why, in words a user acts on.
#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    /// The file cannot be read.
    #[error("{path}: cannot be read ({cause})")]
    Read {
        /// The file.
        path: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The bytes are no picture format gemma-chat reads.
    #[error("{what}: not a PNG, JPEG, WebP or GIF picture")]
    Format {
        /// The file, or `the picture`.
        what: String,
    },
    /// Too large to decode.
    #[error(
        "{what}: {} too large to decode (at most {MAX_SIDE} pixels a side and {} megapixels); scale it down first",
        size_words(.size),
        MAX_PIXELS >> 20
    )]
    TooLarge {
        /// The file, or `the picture`.
        what: String,
        /// Its width and height, where its header could be read.
        size: Option<(u32, u32)>,
    },
    /// The decoder failed (a truncated or corrupt file).
    #[error("{what}: the picture is damaged ({cause})")]
    Damaged {
        /// The file, or `the picture`.
        what: String,
        /// The decoder's words.
        cause: String,
    },
}

/// `W × H pixels is`, or `it is` where the size is unknown.
fn size_words(size: &Option<(u32, u32)>) -> String {
    match size {
        Some((w, h)) => format!("{w} × {h} pixels is"),
        None => "it is".to_string(),
    }
}

/// The size a picture's header gives, read without the side limits (which refused it) but
/// under the same allocation bound: what a refusal reports.
fn header_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .ok()?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_ALLOC);
    reader.limits(limits);
    reader.into_dimensions().ok()
}

/// The soft tokens the picture in `bytes` makes at `budget`, from its header alone (nothing is
/// decoded): what a message's context check counts before any tower runs. `None` when the
/// header cannot be read or the picture cannot fit the budget (decoding it says why).
pub fn soft_tokens(bytes: &[u8], budget: usize) -> Option<usize> {
    let (width, height) = header_size(bytes)?;
    let (h, w) = crate::patches::fit(height, width, budget)?;
    let block = crate::patches::PATCH * crate::patches::POOL;
    Some(((h / block) * (w / block)) as usize)
}

/// A decoded picture.
#[derive(Debug, Clone)]
pub struct Picture {
    /// Its pixels, upright, 8-bit RGB.
    pub rgb: RgbImage,
    /// The file's format.
    pub format: ImageFormat,
}

impl Picture {
    /// Reads and decodes the picture file at `path` (a regular file of at most [`MAX_FILE`]).
    pub fn open(path: &Path) -> Result<Self, PictureError> {
        let (bytes, what) = read(path)?;
        Self::decode(&bytes, &what)
    }

    /// Decodes `bytes`; `what` names them in errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Self, PictureError> {
        let (mut decoder, format) = header(bytes, what)?;
        let damaged = |e: image::ImageError| PictureError::Damaged {
            what: what.to_string(),
            cause: e.to_string(),
        };
        let orientation = decoder.orientation().map_err(damaged)?;
        let mut image = DynamicImage::from_decoder(decoder).map_err(damaged)?;
        image.apply_orientation(orientation);
        Ok(Self {
            rgb: image.into_rgb8(),
            format,
        })
    }

    /// The upright width and height of the picture file at `path`, from its header: what
    /// [`Picture::open`] refuses is refused, but no pixel is decoded.
    pub fn probe(path: &Path) -> Result<(u32, u32), PictureError> {
        let (bytes, what) = read(path)?;
        Self::probe_bytes(&bytes, &what).map(|(size, _)| size)
    }

    /// [`Picture::probe`] of a picture's `bytes` (`what` names them in errors), with its format.
    pub fn probe_bytes(
        bytes: &[u8],
        what: &str,
    ) -> Result<((u32, u32), ImageFormat), PictureError> {
        let (mut decoder, format) = header(bytes, what)?;
        let (w, h) = decoder.dimensions();
        let turned = decoder.orientation().is_ok_and(|o| {
            use image::metadata::Orientation::*;
            matches!(o, Rotate90 | Rotate270 | Rotate90FlipH | Rotate270FlipH)
        });
        Ok((if turned { (h, w) } else { (w, h) }, format))
    }
}

/// The bytes of the picture file at `path` (a regular file of at most [`MAX_FILE`]), and its
/// name for messages.
fn read(path: &Path) -> Result<(Vec<u8>, String), PictureError> {
    let what = path.display().to_string();
    let bytes = gemma_files::read_limited(path, MAX_FILE).map_err(|cause| PictureError::Read {
        path: what.clone(),
        cause,
    })?;
    Ok((bytes, what))
}

/// A decoder for `bytes` once its header shows a picture gemma-chat reads, within the limits.
fn header<'a>(
    bytes: &'a [u8],
    what: &str,
) -> Result<(Box<dyn ImageDecoder + 'a>, ImageFormat), PictureError> {
    let damaged = |e: image::ImageError| PictureError::Damaged {
        what: what.to_string(),
        cause: e.to_string(),
    };
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| damaged(e.into()))?;
    let format = match reader.format() {
        Some(f @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif)) => {
            f
        }
        _ => {
            return Err(PictureError::Format {
                what: what.to_string(),
            });
        }
    };
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_ALLOC);
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(|e| match e {
        image::ImageError::Limits(_) => PictureError::TooLarge {
            what: what.to_string(),
            size: header_size(bytes),
        },
        e => damaged(e),
    })?;
    let (width, height) = decoder.dimensions();
    if width > MAX_SIDE || height > MAX_SIDE || u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(PictureError::TooLarge {
            what: what.to_string(),
            size: Some((width, height)),
        });
    }
    Ok((Box::new(decoder), format))
}
