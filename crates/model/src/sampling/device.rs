//! The next position's logits left where the model computed them ([`NextLogits`]), and the choice
//! of a token that reads back only what it needs: one id for greedy (an argmax on the device),
//! the top-k values and ids for top-k, and for top-p/min-p without top-k the most likely
//! [`NUCLEUS_PROBE`] plus the softmax denominator, with the whole row only when the nucleus is
//! wider than that.

use burn::tensor::{Tensor, TensorData};

use super::{SamplingParams, by_rank, finish};
use crate::error::{Error, Result};

/// Largest top-k chosen on the device: the reduction keeps `k` values per thread, so a larger
/// `k` reads the whole row back and filters on the host instead.
pub const DEVICE_TOP_K_MAX: usize = 256;

/// Candidates read for top-p/min-p without top-k: enough for a peaked distribution; a flatter
/// one reads the whole row.
pub const NUCLEUS_PROBE: usize = 64;

/// One position's logits, `[1, vocab]` in f32, on the model's device.
#[derive(Debug, Clone)]
pub struct NextLogits(Tensor<2>);

impl NextLogits {
    /// The last row of a `[rows, vocab]` logits tensor (a slice on the device, nothing read).
    pub fn last_of(rows: Tensor<2>) -> Self {
        let [n, vocab] = rows.dims();
        if n == 1 {
            Self(rows)
        } else {
            Self(rows.slice([n - 1..n, 0..vocab]))
        }
    }

    /// Row `i` of a `[rows, vocab]` logits tensor (a slice on the device, nothing read).
    pub fn row_of(rows: &Tensor<2>, i: usize) -> Self {
        let [_, vocab] = rows.dims();
        Self(rows.clone().slice([i..i + 1, 0..vocab]))
    }

    /// Vocabulary size.
    pub fn vocab(&self) -> usize {
        self.0.dims()[1]
    }

    /// Whether the logits are in host memory already (the CPU backend).
    pub fn on_host(&self) -> bool {
        crate::backend::is_host(&self.0.device())
    }

    /// The logits with `ids` ruled out (set to −∞) where they are: nothing is read back, so a
    /// pick after it reads only what it would have read anyway. Ids past the vocabulary are
    /// ignored.
    pub fn without(self, ids: &[u32]) -> Self {
        let vocab = self.vocab();
        let device = self.0.device();
        let mut t = self.0;
        for i in ids.iter().map(|&i| i as usize).filter(|&i| i < vocab) {
            let minus_inf = Tensor::<2>::full([1, 1], f32::NEG_INFINITY, &device);
            t = t.slice_assign([0..1, i..i + 1], minus_inf);
        }
        Self(t)
    }

    /// The logits with `delta` added to `id`'s where they are (nothing read back); an id past the
    /// vocabulary is ignored. A soft nudge, where [`NextLogits::without`] is a ban: the thought
    /// budget raises the end of a thought this way as the budget runs out.
    pub fn biased(self, id: u32, delta: f32) -> Self {
        let i = id as usize;
        if i >= self.vocab() || delta == 0.0 {
            return self;
        }
        let one = self.0.clone().slice([0..1, i..i + 1]).add_scalar(delta);
        Self(self.0.slice_assign([0..1, i..i + 1], one))
    }

    /// All of them, on the host.
    pub fn to_vec(self) -> Result<Vec<f32>> {
        floats(self.0.into_data())
    }

    /// The most likely id, computed where the logits are; one id comes back.
    pub fn argmax(self) -> Result<u32> {
        let id = ints(self.0.argmax(1).into_data())?;
        id.first()
            .map(|&i| i as u32)
            .ok_or_else(|| Error::Backend("argmax returned nothing".into()))
    }
}

fn floats(d: TensorData) -> Result<Vec<f32>> {
    d.convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| Error::Backend(format!("cannot read logits: {e:?}")))
}

fn ints(d: TensorData) -> Result<Vec<i64>> {
    d.convert::<i64>()
        .try_into_vec::<i64>()
        .map_err(|e| Error::Backend(format!("cannot read token ids: {e:?}")))
}

/// What a pick read back: the token itself (greedy), the filtered candidates to draw from, or
/// the whole row when the filters need it.
pub(super) enum ReadBack {
    Id(u32),
    Candidates(Vec<(u32, f32)>),
    Row(Vec<f32>),
}

/// Reads back from `logits` what `p` needs, and how many values that was. The draw is the
/// sampler's, the same on every backend.
pub(super) fn read_back(logits: NextLogits, p: &SamplingParams) -> Result<(ReadBack, usize)> {
    if p.temperature <= 0.0 {
        return Ok((ReadBack::Id(logits.argmax()?), 1));
    }
    let vocab = logits.vocab();
    let wide = p.top_k > DEVICE_TOP_K_MAX || (p.top_k == 0 && p.top_p >= 1.0 && p.min_p <= 0.0);
    if wide || vocab <= NUCLEUS_PROBE {
        // Plain temperature sampling needs every probability; so does a very large top-k.
        return Ok((ReadBack::Row(logits.to_vec()?), vocab));
    }
    let raw = logits.0;
    let scaled = raw.clone().div_scalar(p.temperature.max(1e-6));
    let k = if p.top_k > 0 { p.top_k } else { NUCLEUS_PROBE }.min(vocab);
    let (values, ids) = scaled.clone().topk_with_indices(k, 1);
    let values = floats(values.into_data())?;
    let ids = ints(ids.into_data())?;
    let mut cands: Vec<(u32, f32)> = ids.iter().map(|&i| i as u32).zip(values).collect();
    cands.sort_by(by_rank);
    let mut read = 2 * k;
    let kept = if p.top_k > 0 || k == vocab {
        finish(cands, None, p)
    } else {
        // Top-p/min-p over the whole vocabulary: the probe's probabilities need the full
        // softmax denominator, one more value.
        let max = cands[0].1;
        let z: Tensor<1> = scaled.sub_scalar(max).exp().sum().reshape([1]);
        let z = floats(z.into_data())?[0];
        read += 1;
        finish(cands, Some(z), p)
    };
    Ok(match kept {
        Some(kept) => (ReadBack::Candidates(kept), read),
        // The nucleus is wider than the probe: read the row after all.
        None => (ReadBack::Row(floats(raw.into_data())?), read + vocab),
    })
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::tensor::Device;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;
    use crate::sampling::Sampler;

    /// 1,000 logits: a few likely tokens over a noisy floor (`peaked`), or the floor alone.
    fn logits(seed: u64, peaked: bool) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..1000)
            .map(|i| {
                let boost = if peaked && i % 97 == 3 { 9.0 } else { 0.0 };
                boost + rng.random_range(-1.0f32..1.0) * if peaked { 2.0 } else { 0.2 }
            })
            .collect()
    }

    fn on_device(v: &[f32]) -> NextLogits {
        let t = Tensor::<2>::from_data(TensorData::new(v.to_vec(), [1, v.len()]), &Device::flex());
        NextLogits::last_of(t)
    }

    fn params(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            seed: 11,
        }
    }

    /// Each setting draws the same 40 tokens on the device path as on the host, reading back
    /// what it should: one id for greedy, k values and ids for top-k, the probe and the
    /// denominator for a narrow nucleus, the whole row for a wide one or plain temperature.
    #[test]
    fn the_device_path_draws_what_the_host_draws_and_reads_back_little() {
        let probe = 2 * NUCLEUS_PROBE + 1;
        let cases = [
            (params(0.0, 64, 0.95, 0.0), true, 1),
            (params(0.8, 40, 0.9, 0.0), false, 80),
            (params(1.0, 64, 1.0, 0.1), true, 128),
            (params(1.0, 0, 0.9, 0.0), true, probe),
            (params(1.0, 0, 1.0, 0.05), true, probe),
            (params(1.0, 0, 0.9, 0.0), false, probe + 1000),
            (params(1.0, 0, 1.0, 0.0), true, 1000),
            (params(1.0, 300, 0.95, 0.0), true, 1000),
        ];
        for (seed, (p, peaked, read)) in cases.into_iter().enumerate() {
            let v = logits(seed as u64, peaked);
            let mut host = Sampler::new(p.clone());
            let mut dev = Sampler::new(p.clone());
            let a: Vec<u32> = (0..40).map(|_| host.sample(&v)).collect();
            let b: Vec<u32> = (0..40)
                .map(|_| dev.pick_on_device(on_device(&v)).expect("pick"))
                .collect();
            assert_eq!(a, b, "{p:?}");
            assert_eq!(dev.read_back(), read, "{p:?}");
            if p.temperature > 0.0 {
                let distinct: std::collections::BTreeSet<_> = a.iter().collect();
                assert!(distinct.len() > 1, "{p:?} drew one token only");
            }
        }
    }

    #[test]
    fn the_last_row_is_the_one_picked() {
        let rows = Tensor::<2>::from_data(
            TensorData::new(vec![5.0f32, 0.0, 0.0, 0.0, 0.0, 7.0], [2, 3]),
            &Device::flex(),
        );
        let next = NextLogits::last_of(rows);
        assert_eq!(next.vocab(), 3);
        assert!(next.on_host());
        assert_eq!(next.argmax().expect("argmax"), 2);
    }

    /// Ruling ids out where the logits are draws what the host draws with those ids at −∞, and
    /// reads back no more than a pick without them.
    #[test]
    fn ids_ruled_out_on_the_device_are_never_drawn() {
        let v = logits(7, true);
        let banned: Vec<u32> = (0..1000)
            .filter(|i| i % 97 == 3)
            .take(4)
            .chain([5000])
            .collect();
        let mut masked = v.clone();
        for &i in banned.iter().filter(|&&i| i < 1000) {
            masked[i as usize] = f32::NEG_INFINITY;
        }
        for p in [params(0.0, 64, 0.95, 0.0), params(1.0, 64, 0.95, 0.0)] {
            let mut host = Sampler::new(p.clone());
            let mut dev = Sampler::new(p.clone());
            for _ in 0..40 {
                let want = host.sample(&masked);
                let got = dev
                    .pick_on_device(on_device(&v).without(&banned))
                    .expect("pick");
                assert_eq!(got, want, "{p:?}");
                assert!(!banned.contains(&got));
            }
            assert!(dev.read_back() <= 128, "{p:?}: {}", dev.read_back());
        }
    }

    /// A bias lands on its id alone, on the device, and is drawn as the host draws it.
    #[test]
    fn a_bias_raises_one_id_where_the_logits_are() {
        let v = logits(9, true);
        let biased = on_device(&v).biased(5, 4.5).biased(70_000, 1.0);
        let got = biased.clone().to_vec().expect("row");
        for (i, (a, b)) in v.iter().zip(&got).enumerate() {
            let want = if i == 5 { a + 4.5 } else { *a };
            assert!((want - b).abs() < 1e-6, "id {i}: {b} instead of {want}");
        }
        assert_eq!(biased.biased(5, 100.0).argmax().expect("argmax"), 5);
    }
}
