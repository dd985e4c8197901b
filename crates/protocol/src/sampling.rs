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

/// A seed that differs from call to call, for settings that ask for a random one (a seed unset or
/// 0): the clock's nanoseconds mixed with `salt` (a process id, a request's number) by
/// splitmix64, so that close clocks give unrelated seeds; never 0.
pub fn fresh_seed(salt: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut z = nanos ^ salt;
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).max(1)
}
