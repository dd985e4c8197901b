//! Mono sound to 16 kHz, as transformers' `load_audio` makes it: `soxr.resample(..., "soxr_hq")`
//! (its own length, `n × 16000 / rate` rounded), then padded with zeros or cut to
//! `ceil(n × 16000 / rate)` samples. Through rubato's sinc resampler in f64, set to come close to
//! soxr's HQ filter (flat to 0.913 of the lower Nyquist, stopped at it): cutoff at the middle of
//! that band, 256 taps at the lower rate, and its output put back on the input's clock.
//!
//! Measured against soxr on the fixtures (`tests/fixtures/make_audio_features.py`, bounded in
//! `tests/audio.rs`): chirps up to 0.45 × the source rate with a tone, white noise and a run of
//! zeros, largest and root-mean-square sample differences: 44.1 kHz 4.2e-3 / 3.1e-4 (MP3 4.5e-3
//! / 3.1e-4), 48 kHz 2.6e-3 / 2.1e-4, 22.05 kHz 3.4e-3 / 4.5e-4, 8 kHz (up) 1.8e-3 / 5.2e-4;
//! espeak-ng speech (22.05 kHz Vorbis, the decoders differ too) 5.5e-4 / 3.9e-5. The log-mel
//! features then differ by at most 0.10 to 0.19, 4e-4 to 1e-3 on average. rubato's FFT
//! resampler, tried first, differs by up to 0.49 (rms 0.054) in soxr's transition band, and its
//! sinc resampler off the input's clock (as `process_all` leaves it) by up to 0.85.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{
    Async, FixedAsync, Resampler, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};

use super::{AudioError, SAMPLE_RATE};

/// The cutoff, relative to the lower Nyquist: the middle of soxr HQ's transition band (0.913 to
/// 1), nudged to what came closest on the fixtures.
const CUTOFF: f32 = 0.957;
/// The filter's length in samples of the lower of the two rates.
const TAPS: f64 = 256.0;
/// Steps of the sinc table between two input samples (linearly interpolated between): as close
/// to soxr as cubic steps at 512, and twice as fast on a long clip (30 s at 48 kHz: 0.2 s).
const OVERSAMPLING: usize = 1024;
/// Frames per chunk given to the resampler.
const CHUNK: usize = 1024;

/// `mono` at `rate` resampled to [`SAMPLE_RATE`]: `ceil(n × 16000 / rate)` samples. `what`
/// names the sound in the error rubato could give (none for a rate in [`super::RATES`]).
pub fn to_16k(mono: &[f32], rate: u32, what: &str) -> Result<Vec<f32>, AudioError> {
    if rate == SAMPLE_RATE || mono.is_empty() {
        return Ok(mono.to_vec());
    }
    let (n, r) = (mono.len() as u64, u64::from(rate));
    let wanted = length_at_16k(mono.len(), rate);
    let soxr_length = ((n * u64::from(SAMPLE_RATE) + r / 2) / r) as usize;
    let mut out = resample(mono, rate).map_err(|cause| AudioError::Damaged {
        what: what.into(),
        cause: format!("cannot be resampled from {rate} Hz: {cause}"),
    })?;
    out.truncate(soxr_length.min(wanted));
    out.resize(wanted, 0.0);
    Ok(out)
}

/// How many samples [`to_16k`] makes of `n` samples at `rate`.
pub fn length_at_16k(n: usize, rate: u32) -> usize {
    if rate == SAMPLE_RATE || rate == 0 {
        return n;
    }
    (n as u64 * u64::from(SAMPLE_RATE)).div_ceil(u64::from(rate)) as usize
}

/// rubato's sinc resampling of `mono` from `rate`, sample `k` of it at time `k / 16000`.
fn resample(mono: &[f32], rate: u32) -> Result<Vec<f32>, String> {
    let ratio = f64::from(SAMPLE_RATE) / f64::from(rate);
    // The length in input samples; rubato takes multiples of 8.
    let sinc_len = (TAPS / ratio.min(1.0) / 8.0).ceil() as usize * 8;
    let (lead, skip) = alignment(ratio, sinc_len);
    // Zeros after the sound too, so that the filter's tail is computed.
    let mut input = vec![0.0f64; lead];
    input.extend(mono.iter().map(|&s| f64::from(s)));
    input.resize(input.len() + sinc_len, 0.0);
    let params = SincInterpolationParameters {
        sinc_len,
        f_cutoff: Some(CUTOFF),
        oversampling_factor: OVERSAMPLING,
        interpolation: SincInterpolationType::Linear,
        window: WindowFunction::BlackmanHarris2,
    };
    let mut resampler = Async::<f64>::new_sinc(ratio, 1.0, &params, CHUNK, 1, FixedAsync::Input)
        .map_err(|e| e.to_string())?;
    let adapter = InterleavedSlice::new(&input, 1, input.len()).map_err(|e| e.to_string())?;
    let out = resampler
        .process_all(&adapter, input.len(), None)
        .map_err(|e| e.to_string())?;
    Ok(out
        .take_data()
        .into_iter()
        .skip(skip)
        .map(|s| s as f32)
        .collect())
}

/// How many zeros to put before the sound and how many output samples to drop then, so that the
/// output falls on the input's clock. rubato's `process_all` trims a whole number of samples
/// for its filter's delay, which is fractional: its output runs ahead by
/// `1 − frac(sinc_len × ratio / 2)` samples (measured; the unit test checks it at each common
/// rate). `lead` zeros hold it back by `lead × ratio`: the first `lead` within 1e-3 of a whole
/// number of samples is taken.
fn alignment(ratio: f64, sinc_len: usize) -> (usize, usize) {
    let ahead = 1.0 - (sinc_len as f64 * ratio / 2.0).fract();
    let miss = |lead: usize| {
        let late = lead as f64 * ratio - ahead;
        (late - late.round()).abs()
    };
    let lead = (0..8_192usize)
        .filter(|&lead| lead as f64 * ratio - ahead > -0.5)
        .find(|&lead| miss(lead) < 1e-3)
        .unwrap_or_else(|| {
            (0..8_192usize)
                .filter(|&lead| lead as f64 * ratio - ahead > -0.5)
                .min_by(|&a, &b| miss(a).total_cmp(&miss(b)))
                .unwrap_or(0)
        });
    (
        lead,
        (lead as f64 * ratio - ahead).round().max(0.0) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_is_on_the_inputs_clock_at_every_common_rate() {
        for rate in [
            1_000u32, 8_000, 11_025, 12_000, 22_050, 32_000, 44_100, 48_000, 96_000,
        ] {
            let tone = |t: f64| (2.0 * std::f64::consts::PI * 300.0 * t).sin();
            let input: Vec<f32> = (0..rate / 2)
                .map(|i| tone(f64::from(i) / f64::from(rate)) as f32)
                .collect();
            let out = to_16k(&input, rate, "tone").expect("resamples");
            assert_eq!(out.len(), 8_000, "{rate}");
            // Away from the ends, each sample is the tone at its own time. Measured: off by
            // 2e-3 at 1 kHz to 4e-5 at 48 kHz, as if 0.001 of a source sample late (the sinc
            // table's step); bounded at 0.002 of a source sample, a sample off would be 100
            // times that.
            let most = (1_000..7_000)
                .map(|k| (f64::from(out[k]) - tone(k as f64 / 16_000.0)).abs())
                .fold(0.0, f64::max);
            let bound = 2.0 * std::f64::consts::PI * 300.0 * 0.002 / f64::from(rate);
            assert!(most < bound, "{rate} Hz: off by {most:e}");
        }
    }
}
