//! Sampling parameters as plain data: what a front end resolves for a tab and the engine uses
//! for its turns (the sampler itself is the model crate's).

/// Sampling settings for one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy; otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Drop tokens below `min_p` times the top probability (0: none).
    pub min_p: f32,
    /// RNG seed.
    pub seed: u64,
}

/// Sampling values one layer sets (`None`: not set there).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingLayer {
    /// 0 to 2.
    pub temperature: Option<f32>,
    /// 0 is off.
    pub top_k: Option<usize>,
    /// In (0, 1].
    pub top_p: Option<f32>,
    /// In [0, 1].
    pub min_p: Option<f32>,
    /// 0 is random.
    pub seed: Option<u64>,
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token (what oracle checks and tabs that were
    /// given no settings use; front ends resolve theirs through the config's resolver).
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 64,
            top_p: 0.95,
            min_p: 0.0,
            seed: 0,
        }
    }
}
