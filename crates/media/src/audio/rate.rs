//! Mono sound to 16 kHz, as transformers' `load_audio` makes it (`soxr.resample(..., "soxr_hq")`,
//! then padded with zeros or cut to `ceil(n × 16000 / rate)` samples), through rubato's FFT
//! resampler in f64.
//!
//! Not soxr's filter, so not its samples. Measured against soxr's HQ output
//! (`tests/fixtures/make_audio_features.py`, bounded in `tests/audio.rs`) on chirps with a tone,
//! white noise and a run of zeros; largest and root-mean-square sample differences, then the
//! largest below 90 % of the lower Nyquist: 44.1 kHz 0.47 / 0.038 / 4.4e-4, 48 kHz 0.48 / 0.036 /
//! 1.6e-4, 22.05 kHz 0.49 / 0.054 / 4.8e-4, 8 kHz (up) 0.066 / 0.014 / 9.6e-4; espeak-ng speech
//! (22.05 kHz Vorbis, the decoders differ too) 0.045 / 0.0034 / 6.0e-5. The two filters differ
//! in soxr's transition band (0.913 to 1 × the lower Nyquist, 7.3 to 8 kHz down to 16 kHz),
//! where a chirp at 0.45 full scale makes the largest differences; the log-mel features of the
//! two then differ by 0.023 to 0.028 on average (0.10 from 8 kHz), most in the top mel bins,
//! and by at most 0.015 to 0.093 in the bins below.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler, WindowFunction};

use super::{AudioError, SAMPLE_RATE};

/// Frames per chunk given to the resampler, in one FFT block: of the block sizes tried (1,024 in
/// four sub-blocks, rubato's default, to 65,536), the one closest to soxr on the fixtures.
const CHUNK: usize = 16_384;

/// `mono` at `rate` resampled to [`SAMPLE_RATE`]: `ceil(n × 16000 / rate)` samples. `what`
/// names the sound in the error rubato could give (none for a rate in [`super::RATES`]).
pub fn to_16k(mono: &[f32], rate: u32, what: &str) -> Result<Vec<f32>, AudioError> {
    if rate == SAMPLE_RATE || mono.is_empty() {
        return Ok(mono.to_vec());
    }
    let wanted = (mono.len() as u64 * u64::from(SAMPLE_RATE)).div_ceil(u64::from(rate)) as usize;
    let input: Vec<f64> = mono.iter().map(|&s| f64::from(s)).collect();
    let mut out = resample(&input, rate).map_err(|cause| AudioError::Damaged {
        what: what.into(),
        cause: format!("cannot be resampled from {rate} Hz: {cause}"),
    })?;
    out.resize(wanted, 0.0);
    Ok(out.into_iter().map(|s| s as f32).collect())
}

/// rubato's whole-clip resampling of `input` from `rate`.
fn resample(input: &[f64], rate: u32) -> Result<Vec<f64>, String> {
    let mut resampler = Fft::<f64>::new_custom(
        rate as usize,
        SAMPLE_RATE as usize,
        CHUNK,
        1,
        1,
        WindowFunction::BlackmanHarris2,
        FixedSync::Input,
    )
    .map_err(|e| e.to_string())?;
    let adapter = InterleavedSlice::new(input, 1, input.len()).map_err(|e| e.to_string())?;
    let out = resampler
        .process_all(&adapter, input.len(), None)
        .map_err(|e| e.to_string())?;
    Ok(out.take_data())
}
