//! Readers for the sampling settings, each checked against its [`sampling::Knob`].

use serde::{Deserialize, Deserializer};

use super::sampling::{self, Knob};

fn read<'de, D: Deserializer<'de>>(d: D, k: &Knob) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    k.check(v).map_err(serde::de::Error::custom)
}

/// `temperature`.
pub fn temperature<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
    read(d, &sampling::TEMPERATURE).map(|v| Some(v as f32))
}
/// `top_k`.
pub fn top_k<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    read(d, &sampling::TOP_K).map(|v| Some(v as usize))
}
/// `top_p`.
pub fn top_p<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
    read(d, &sampling::TOP_P).map(|v| Some(v as f32))
}
/// `min_p`.
pub fn min_p<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
    read(d, &sampling::MIN_P).map(|v| Some(v as f32))
}
/// `seed` (TOML integers end at 2^63 - 1).
pub fn seed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    read(d, &sampling::SEED).map(|v| Some(v as u64))
}
/// `max_new_tokens` in a preset.
pub fn max_new_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    read(d, &sampling::MAX_NEW_TOKENS).map(|v| Some(v as usize))
}
/// `image_tokens` in a preset: one of Gemma 4's budgets.
pub fn image_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let n = u64::deserialize(d)?;
    match usize::try_from(n) {
        Ok(n) if gemma_media::BUDGETS.contains(&n) => Ok(Some(n)),
        _ => Err(serde::de::Error::custom(format!(
            "image_tokens = {n} is not a budget Gemma 4 takes: use 70, 140, 280, 560 or 1120"
        ))),
    }
}
