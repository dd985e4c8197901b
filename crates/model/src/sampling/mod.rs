//! Next-token choice: greedy at temperature 0, otherwise temperature, top-k, top-p and min-p
//! filtering and a seeded draw. The filters here are pure functions of the logits on the host;
//! [`NextLogits`] (in `device`) keeps the logits where the model left them and reads back only
//! what a choice needs.

mod device;

pub use device::{DEVICE_TOP_K_MAX, NUCLEUS_PROBE, NextLogits};

use std::cmp::Ordering;

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::error::Result;

pub use gemma_protocol::{SamplingLayer, SamplingParams};

/// A seeded sampler.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// Values the last [`Sampler::pick`] read back from the device.
    read_back: usize,
}

impl Sampler {
    /// A sampler whose draws depend only on `params.seed` and the logits it sees.
    pub fn new(params: SamplingParams) -> Self {
        let rng = StdRng::seed_from_u64(params.seed);
        Self {
            params,
            rng,
            read_back: 0,
        }
    }

    /// Picks the next token from one position's logits on the host.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let cands = filter(logits, &self.params);
        let r: f32 = self.rng.random();
        draw(&cands, r).unwrap_or_else(|| argmax(logits))
    }

    /// Picks the next token from logits that may live on a GPU. On the CPU backend the logits
    /// are already in host memory and [`Sampler::sample`] runs on them; on a device, greedy reads
    /// back one id and top-k/top-p read back only the candidates (see [`NextLogits`]). The same
    /// seed and logits give the same token either way.
    pub fn pick(&mut self, logits: NextLogits) -> Result<u32> {
        if logits.on_host() {
            let v = logits.to_vec()?;
            self.read_back = v.len();
            return Ok(self.sample(&v));
        }
        self.pick_on_device(logits)
    }

    /// [`Sampler::pick`]'s device path, whatever the device (tests run it on the CPU too).
    pub fn pick_on_device(&mut self, logits: NextLogits) -> Result<u32> {
        let (got, read) = device::read_back(logits, &self.params)?;
        self.read_back = read;
        Ok(match got {
            device::ReadBack::Id(id) => id,
            device::ReadBack::Candidates(kept) => {
                let r: f32 = self.rng.random();
                draw(&kept, r).ok_or_else(|| {
                    crate::error::Error::Backend("no candidate survived the filters".into())
                })?
            }
            device::ReadBack::Row(all) => self.sample(&all),
        })
    }

    /// How many values (logits, candidate ids and probabilities, sums) the last pick read back
    /// from where the logits were.
    pub fn read_back(&self) -> usize {
        self.read_back
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

/// Most likely first; the lower id first on a tie.
fn by_rank(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
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
    if p.top_k > 0 && p.top_k < c.len() {
        // Selection, then a sort of the k kept: the vocabulary is 262k entries.
        c.select_nth_unstable_by(p.top_k - 1, by_rank);
        c.truncate(p.top_k);
    }
    c.sort_by(by_rank);
    finish(c, None, p).unwrap_or_default()
}

/// Softmax, min-p and top-p over candidates sorted by [`by_rank`] (scaled logits), renormalised.
/// With `z = Some(Σ exp(x − max))` over the whole vocabulary the candidates are its most likely
/// few, and the answer is `None` when tokens outside them could pass the filters; with `None`
/// the candidates are the whole set.
fn finish(mut c: Vec<(u32, f32)>, z: Option<f32>, p: &SamplingParams) -> Option<Vec<(u32, f32)>> {
    let max = c.first().map(|x| x.1).unwrap_or(0.0);
    let mut sum = 0.0;
    for x in c.iter_mut() {
        x.1 = (x.1 - max).exp();
        sum += x.1;
    }
    let total = z.unwrap_or(sum);
    c.iter_mut().for_each(|x| x.1 /= total);
    let mut complete = z.is_none();
    if p.min_p > 0.0 {
        let floor = c.first().map(|x| x.1).unwrap_or(0.0) * p.min_p;
        let before = c.len();
        c.retain(|x| x.1 >= floor);
        complete |= c.len() < before;
    }
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let mut keep = c.len();
        for (i, x) in c.iter().enumerate() {
            acc += x.1;
            if acc >= p.top_p {
                keep = i + 1;
                complete = true;
                break;
            }
        }
        c.truncate(keep.max(1));
    }
    if !complete {
        return None;
    }
    let total: f32 = c.iter().map(|x| x.1).sum();
    c.iter_mut().for_each(|x| x.1 /= total);
    Some(c)
}

/// The candidate where the cumulative probability passes `r` (uniform in `[0, 1)`); the last
/// one when rounding leaves the sum short of `r`.
fn draw(cands: &[(u32, f32)], r: f32) -> Option<u32> {
    let mut acc = 0.0;
    for &(id, p) in cands {
        acc += p;
        if r < acc {
            return Some(id);
        }
    }
    cands.last().map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.1, 3.0, 3.0, -1.0]), 1);
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [1.0, 2.0, 3.0, 4.0];
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            ..SamplingParams::greedy()
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
        let mut s = Sampler::new(p.clone());
        let b: Vec<u32> = (0..20).map(|_| s.sample(&logits)).collect();
        assert_eq!(a, b);
        // Another seed draws another sequence (a constant sampler fails here).
        let mut s = Sampler::new(SamplingParams { seed: 8, ..p });
        let c: Vec<u32> = (0..20).map(|_| s.sample(&logits)).collect();
        assert_ne!(a, c);
    }

    /// Draws follow softmax(logits / temperature): frequencies within four standard errors of
    /// the probabilities, for two temperatures.
    #[test]
    fn draws_follow_the_tempered_distribution() {
        let probs = [0.5f64, 0.3, 0.15, 0.05];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        for temperature in [1.0f32, 0.5] {
            let p = SamplingParams {
                temperature,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: 11,
            };
            let want: Vec<f64> = {
                let w: Vec<f64> = probs
                    .iter()
                    .map(|q| q.powf(1.0 / temperature as f64))
                    .collect();
                let sum: f64 = w.iter().sum();
                w.iter().map(|x| x / sum).collect()
            };
            let n = 20_000;
            let mut counts = [0usize; 4];
            let mut s = Sampler::new(p);
            for _ in 0..n {
                counts[s.sample(&logits) as usize] += 1;
            }
            for (i, (&c, &q)) in counts.iter().zip(&want).enumerate() {
                let got = c as f64 / n as f64;
                let se = (q * (1.0 - q) / n as f64).sqrt();
                assert!(
                    (got - q).abs() < 4.0 * se,
                    "T={temperature}: token {i} drawn {got:.4}, expected {q:.4}"
                );
            }
        }
    }
}
