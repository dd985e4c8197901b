//! Pictures and recordings sent in requests, written for the engine to read: one file per
//! content, named by its SHA-256, so that a picture sent again is the same file (and the
//! engine's encodings, kept by content, stay warm).

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::request::Media;
use gemma_protocol::{Attachment, MediaKind};

/// The attachment for `m`, its file written under `dir` unless it is there already.
pub(crate) fn attach(dir: &Path, m: &Media) -> Result<Attachment, ApiError> {
    let hash = Sha256::digest(&m.bytes);
    let name: String = hash.iter().map(|b| format!("{b:02x}")).collect();
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
