//! A message's content as the API writes it ([`content`]): a string, or parts — text, pictures
//! as `image_url` data: URLs (PNG, JPEG, WebP, GIF; `detail` sets the soft tokens) and
//! recordings as `input_audio` (WAV, MP3, FLAC, OGG), base64, decoded here; each error names its
//! part.

use base64::Engine as _;
use serde_json::Value;

use crate::error::ApiError;
use crate::request::{Media, Message, join};
use gemma_protocol::MediaKind;

/// A message's content: a string, or parts (text; pictures and recordings only from the user:
/// `user` is `Some(fetch)` for the user's, `fetch` saying whether http(s) picture URLs are
/// taken).
pub(crate) fn content(
    c: Option<&Value>,
    at: &str,
    user: Option<bool>,
) -> Result<Message, ApiError> {
    let parts = match c {
        None | Some(Value::Null) => return Ok(Message::default()),
        Some(Value::String(s)) => {
            return Ok(Message {
                text: s.clone(),
                media: Vec::new(),
            });
        }
        Some(Value::Array(parts)) => parts,
        Some(_) => return Err(ApiError::invalid(at, "a string or an array of parts")),
    };
    let mut m = Message::default();
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => {
                let t = p.get("text").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid(format!("{at}.text"), "a text part needs `text`")
                })?;
                join(
                    &mut m,
                    Message {
                        text: t.into(),
                        media: Vec::new(),
                    },
                );
            }
            "image_url" | "input_audio" if user.is_none() => {
                return Err(ApiError::invalid(
                    at,
                    "only the user's messages carry media",
                ));
            }
            "image_url" => m.media.push(image(p, &at, user == Some(true))?),
            "input_audio" => m.media.push(audio(p, &at)?),
            _ => {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    "a part is text, image_url or input_audio",
                ));
            }
        }
    }
    Ok(m)
}

fn image(p: &Value, at: &str, fetch: bool) -> Result<Media, ApiError> {
    let url = p
        .pointer("/image_url/url")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(format!("{at}.image_url.url"), "needs a URL"))?;
    let field = format!("{at}.image_url.url");
    let tokens = match p.pointer("/image_url/detail").and_then(Value::as_str) {
        Some("low") => 70,
        Some("high") => 1120,
        _ => 280,
    };
    let web = url.starts_with("http://") || url.starts_with("https://");
    if web && fetch {
        return Ok(Media::pending(url, &field, tokens));
    }
    let rest = url.strip_prefix("data:").ok_or_else(|| {
        ApiError::invalid(
            &field,
            "only data: URLs are served (data:image/png;base64,…); http(s) URLs where the \
             server's [serve] fetch_images is on",
        )
    })?;
    let (head, data) = rest
        .split_once(',')
        .ok_or_else(|| ApiError::invalid(&field, "a data: URL has a comma before its data"))?;
    let ext = match head.strip_suffix(";base64") {
        Some("image/png") => "png",
        Some("image/jpeg" | "image/jpg") => "jpg",
        Some("image/webp") => "webp",
        Some("image/gif") => "gif",
        _ => {
            return Err(ApiError::invalid(
                &field,
                "a base64 PNG, JPEG, WebP or GIF (data:image/png;base64,…)",
            ));
        }
    };
    Ok(Media::new(
        decode(data, &field)?,
        MediaKind::Image,
        ext,
        tokens,
    ))
}

fn audio(p: &Value, at: &str) -> Result<Media, ApiError> {
    let field = format!("{at}.input_audio");
    let data = p
        .pointer("/input_audio/data")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(format!("{field}.data"), "needs base64 data"))?;
    let ext = match p.pointer("/input_audio/format").and_then(Value::as_str) {
        Some("wav") => "wav",
        Some("mp3") => "mp3",
        Some("flac") => "flac",
        Some("ogg") => "ogg",
        _ => {
            return Err(ApiError::invalid(
                format!("{field}.format"),
                "wav, mp3, flac or ogg",
            ));
        }
    };
    let bytes = decode(data, &format!("{field}.data"))?;
    Ok(Media::new(bytes, MediaKind::Audio, ext, 0))
}

fn decode(data: &str, field: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| ApiError::invalid(field, format!("not base64: {e}")))
}
