//! Next-token choice on the host: greedy at temperature 0, otherwise temperature, top-k, top-p and
//! min-p filtering and a seeded draw. Pure functions of the logits and the RNG state.

use rand::{Rng, SeedableRng, rngs::StdRng};

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

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 64,
            top_p: 0.95,
            min_p: 0.0,
            seed: 0,
        }
    }
}

/// A seeded sampler.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler whose draws depend only on `params.seed` and the logits it sees.
    pub fn new(params: SamplingParams) -> Self {
        let rng = StdRng::seed_from_u64(params.seed);
        Self { params, rng }
    }

    /// Picks the next token from one position's logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let cands = filter(logits, &self.params);
        let r: f32 = self.rng.random();
        let mut acc = 0.0;
        for &(id, p) in &cands {
            acc += p;
            if r < acc {
                return id;
            }
        }
        cands.last().map(|c| c.0).unwrap_or_else(|| argmax(logits))
    }
}

/// Index of the largest logit; the lowest index wins a tie, as `torch.argmax`.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Candidates after temperature, top-k, top-p and min-p, with renormalised probabilities, most
/// likely first.
pub fn filter(logits: &[f32], p: &SamplingParams) -> Vec<(u32, f32)> {
    let t = p.temperature.max(1e-6);
    let mut c: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l / t))
        .collect();
    c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 && p.top_k < c.len() {
        c.truncate(p.top_k);
    }
    let max = c.first().map(|x| x.1).unwrap_or(0.0);
    let mut sum = 0.0;
    for x in c.iter_mut() {
        x.1 = (x.1 - max).exp();
        sum += x.1;
    }
    c.iter_mut().for_each(|x| x.1 /= sum);
    if p.min_p > 0.0 {
        let floor = c.first().map(|x| x.1).unwrap_or(0.0) * p.min_p;
        c.retain(|x| x.1 >= floor);
    }
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let mut keep = c.len();
        for (i, x) in c.iter().enumerate() {
            acc += x.1;
            if acc >= p.top_p {
                keep = i + 1;
                break;
            }
        }
        c.truncate(keep.max(1));
    }
    let total: f32 = c.iter().map(|x| x.1).sum();
    c.iter_mut().for_each(|x| x.1 /= total);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.1, 3.0, 3.0, -1.0]), 1);
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(s.sample(&[0.1, 3.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [1.0, 2.0, 3.0, 4.0];
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            ..Default::default()
        };
        let c = filter(&logits, &p);
        assert_eq!(c.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 2]);
        assert!((c.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
        let p = SamplingParams {
            top_k: 0,
            top_p: 0.5,
            ..p
        };
        assert_eq!(filter(&logits, &p).len(), 1);
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            seed: 0,
        };
        let c = filter(&[0.0, 0.0, -5.0], &p);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn same_seed_same_draws() {
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
        };
        let logits = [0.5, 0.4, 0.3, 0.2, 0.1];
        let a: Vec<u32> = {
            let mut s = Sampler::new(p.clone());
            (0..20).map(|_| s.sample(&logits)).collect()
        };
        let mut s = Sampler::new(p);
        let b: Vec<u32> = (0..20).map(|_| s.sample(&logits)).collect();
        assert_eq!(a, b);
    }
}
