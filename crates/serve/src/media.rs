//! Pictures and recordings sent in requests, written for the engine to read: one file per
//! content, named by its SHA-256, so that a picture sent again is the same file (and the
//! engine's encodings, kept by content, stay warm).

use std::path::Path;

use crate::error::ApiError;
use crate::request::Media;
use gemma_protocol::{Attachment, MediaKind};

/// The attachments for `media`, in order, each file written under `dir` unless it is there
/// already.
pub(crate) fn attach_all(dir: &Path, media: &[Media]) -> Result<Vec<Attachment>, ApiError> {
    media.iter().map(|m| attach(dir, m)).collect()
}

fn attach(dir: &Path, m: &Media) -> Result<Attachment, ApiError> {
    let name = &m.digest;
    let path = dir.join(format!("{name}.{}", m.ext));
    if !path.exists() {
        // Written aside, then renamed: a reader never sees half a file.
        let part = dir.join(format!("{name}.{}.part", m.ext));
        std::fs::write(&part, &m.bytes)
            .and_then(|()| std::fs::rename(&part, &path))
            .map_err(|e| {
                ApiError::status(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    format!("cannot keep the file for the engine: {e}"),
                )
            })?;
    }
    Ok(match m.kind {
        MediaKind::Image => Attachment::image(path, m.tokens),
        MediaKind::Audio => Attachment::audio(path),
    })
}
