//! `[serve]`: `gemma-chat serve`, the model behind the OpenAI chat completions API.

use serde::Deserialize;

use super::at_least;

/// `[serve]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The address to listen on.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Conversations kept (1 to 64).
    #[serde(deserialize_with = "slots")]
    pub slots: usize,
    /// Answers at once (1 or more; more than `slots` counts as `slots`).
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub parallel: usize,
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// The name of the environment variable with the clients' key (empty: none).
    pub api_key_env: String,
    /// The largest request body, in MiB.
    #[serde(deserialize_with = "at_least::<_, _, 1>")]
    pub max_body_mb: u64,
    /// The most pictures and recordings in one request.
    pub max_media: usize,
    /// Pictures given as http(s) URLs are fetched (public addresses only).
    pub fetch_images: bool,
}

/// 1 to 64 slots.
fn slots<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = i64::deserialize(d)?;
    usize::try_from(v)
        .ok()
        .filter(|n| (1..=64).contains(n))
        .ok_or_else(|| serde::de::Error::custom(format!("{v} is out of range: allowed 1 to 64")))
}
