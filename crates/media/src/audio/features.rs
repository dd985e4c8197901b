//! A piece of 16 kHz sound to the log-mel features and the soft-token count of transformers'
//! Gemma 4 (`Gemma4AudioFeatureExtractor` with its defaults, called on one clip as
//! `Gemma4Processor` calls it; `_compute_audio_num_tokens`), transformers 5.23.0.
//!
//! The extractor, read from its source: the piece is cut to 480,000 samples, padded with zeros
//! to a multiple of 128, then 160 zeros go before it (semicausal). Frames of 320 samples every
//! 160 (as many as fit whole), no dither or preemphasis, times a periodic Hann window (f32),
//! an FFT of 512, the magnitude, 128 triangular HTK mel filters from 0 to 8 kHz over the 257
//! bins (no normalisation), `ln(mel + 0.001)`. A frame is kept in the mask when its whole window
//! (320 samples and the one after) lies on real sound: frame `i` when `160·i + 160 < n`; a frame
//! off the mask is returned, its values zero. numpy takes the FFT in f32, the mel product and log
//! in f64; here the FFT is f64 too, so the only difference is numpy's own f32 rounding.

use std::sync::{Arc, OnceLock};

use realfft::{RealFftPlanner, RealToComplex};

use super::PIECE_SAMPLES;

/// Mel bins in a frame of features.
pub const MEL_BINS: usize = 128;
/// Samples in a frame's window (20 ms).
const FRAME: usize = 320;
/// Samples from one frame to the next (10 ms).
const HOP: usize = 160;
/// The FFT's length, and its count of bins.
const FFT: usize = 512;
const BINS: usize = FFT / 2 + 1;
/// Zeros before the piece (half a window: the first frame is centred on its first sample).
const PAD_LEFT: usize = FRAME / 2;
/// The piece is padded to a multiple of this (the extractor's `pad_to_multiple_of`).
const PAD_MULTIPLE: usize = 128;
/// Added to each mel value before the log.
const MEL_FLOOR: f64 = 1e-3;
/// Most soft tokens one piece becomes (the processor's `audio_seq_length`).
const MAX_TOKENS: usize = 750;

/// A piece's features, as the audio tower takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    /// How many frames (10 ms each).
    pub frames: usize,
    /// `frames × MEL_BINS` log-mel values, row-major; zero in a frame off the mask.
    pub values: Vec<f32>,
    /// Per frame: whether its window lies wholly on the piece's sound (not on padding).
    pub mask: Vec<bool>,
}

/// The features of `piece` (16 kHz mono; only its first [`PIECE_SAMPLES`] are used, as
/// transformers truncates).
pub fn features(piece: &[f32]) -> Features {
    let piece = &piece[..piece.len().min(PIECE_SAMPLES)];
    let n = piece.len();
    let padded = n.div_ceil(PAD_MULTIPLE) * PAD_MULTIPLE + PAD_LEFT;
    // Each frame reads one sample past its window (the extractor unfolds FRAME + 1 for a
    // preemphasis it does not apply), so a frame needs FRAME + 1 samples.
    let frames = if padded > FRAME {
        (padded - FRAME - 1) / HOP + 1
    } else {
        0
    };
    let tables = Tables::get();
    let mut input = tables.fft.make_input_vec();
    let mut spectrum = tables.fft.make_output_vec();
    let mut scratch = tables.fft.make_scratch_vec();
    let mut magnitude = [0.0f64; BINS];
    let mut values = Vec::with_capacity(frames * MEL_BINS);
    let mask: Vec<bool> = (0..frames).map(|i| HOP * i + PAD_LEFT < n).collect();
    for (i, &kept) in mask.iter().enumerate() {
        if !kept {
            values.extend([0.0; MEL_BINS]);
            continue;
        }
        let start = HOP * i;
        for (k, slot) in input.iter_mut().enumerate() {
            // Position `start + k` in the left-padded piece; past the window the FFT's zeros.
            let sample = match (start + k).checked_sub(PAD_LEFT) {
                Some(at) if k < FRAME => piece.get(at).copied().unwrap_or(0.0),
                _ => 0.0,
            };
            let windowed = if k < FRAME {
                sample * tables.window[k]
            } else {
                0.0
            };
            *slot = f64::from(windowed);
        }
        // Lengths are the planner's own, so the transform cannot fail.
        let done = tables
            .fft
            .process_with_scratch(&mut input, &mut spectrum, &mut scratch);
        debug_assert!(done.is_ok());
        for (m, c) in magnitude.iter_mut().zip(&spectrum) {
            // numpy's magnitude is f32 before the f64 mel product.
            *m = f64::from(c.norm() as f32);
        }
        values.extend(tables.mel.iter().map(|filter| {
            let mel: f64 = filter
                .weights
                .iter()
                .zip(&magnitude[filter.first..])
                .map(|(w, m)| w * m)
                .sum();
            (mel + MEL_FLOOR).ln() as f32
        }));
    }
    Features {
        frames,
        values,
        mask,
    }
}

/// The number of `<|audio|>` soft tokens a piece of `samples` 16 kHz samples becomes: its mel
/// frames (`(samples + 160 − 321) ÷ 160 + 1`, none below 161 samples), halved rounding up by
/// each of the encoder's two stride-2 convolutions, at most 750 (`_compute_audio_num_tokens`).
pub fn audio_tokens(samples: usize) -> usize {
    let padded = samples + PAD_LEFT;
    if padded <= FRAME {
        return 0;
    }
    let frames = (padded - FRAME - 1) / HOP + 1;
    frames.div_ceil(2).div_ceil(2).min(MAX_TOKENS)
}

/// One mel filter: its weights over the bins from `first` on (the rest are zero).
struct Filter {
    first: usize,
    weights: Vec<f64>,
}

/// The window, the mel filters and the FFT, made once.
struct Tables {
    window: [f32; FRAME],
    mel: Vec<Filter>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl Tables {
    fn get() -> &'static Tables {
        static TABLES: OnceLock<Tables> = OnceLock::new();
        TABLES.get_or_init(|| Tables {
            window: window(),
            mel: mel_filters(),
            fft: RealFftPlanner::<f64>::new().plan_fft_forward(FFT),
        })
    }
}

/// The periodic Hann window (`np.hanning(321)[:-1]`, then f32).
fn window() -> [f32; FRAME] {
    std::array::from_fn(|k| {
        let phase = 2.0 * std::f64::consts::PI * k as f64 / FRAME as f64;
        (0.5 - 0.5 * phase.cos()) as f32
    })
}

/// transformers' `mel_filter_bank(257, 128, 0, 8000, 16000, norm=None, mel_scale="htk")`:
/// triangles between mel-spaced corners, over bins `k × 31.25` Hz.
fn mel_filters() -> Vec<Filter> {
    let to_mel = |hz: f64| 2595.0 * (1.0 + hz / 700.0).log10();
    let to_hz = |mel: f64| 700.0 * (10f64.powf(mel / 2595.0) - 1.0);
    let top = to_mel(8000.0);
    let corners: Vec<f64> = (0..MEL_BINS + 2)
        .map(|i| {
            let mel = if i == MEL_BINS + 1 {
                top
            } else {
                i as f64 * (top / (MEL_BINS + 1) as f64)
            };
            to_hz(mel)
        })
        .collect();
    let bin_hz = |k: usize| k as f64 * (8000.0 / (BINS - 1) as f64);
    (0..MEL_BINS)
        .map(|m| {
            let (lo, mid, hi) = (corners[m], corners[m + 1], corners[m + 2]);
            let weight = |k: usize| {
                let f = bin_hz(k);
                let down = -(lo - f) / (mid - lo);
                let up = (hi - f) / (hi - mid);
                down.min(up).max(0.0)
            };
            let first = (0..BINS).find(|&k| weight(k) > 0.0).unwrap_or(BINS);
            let last = (first..BINS)
                .take_while(|&k| weight(k) > 0.0)
                .last()
                .map_or(first, |k| k + 1);
            Filter {
                first,
                weights: (first..last).map(weight).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_mask_follow_the_padding() {
        // 1,600 samples pad to 1,664: 10 frames, of which the first 9 lie wholly on sound.
        let f = features(&[0.1; 1_600]);
        assert_eq!(f.frames, 10);
        assert_eq!(f.mask.iter().filter(|&&m| m).count(), 9);
        assert!(!f.mask[9]);
        assert!(f.values[9 * MEL_BINS..].iter().all(|&v| v == 0.0));
        assert_eq!(features(&[]).frames, 0);
        assert_eq!(features(&[0.5; 100]).frames, 0);
    }

    #[test]
    fn silence_is_the_log_of_the_floor() {
        let f = features(&[0.0; 16_000]);
        let floor = (MEL_FLOOR as f32).ln();
        assert!(f.values.iter().all(|&v| (v - floor).abs() < 1e-6));
    }

    #[test]
    fn each_filter_is_a_triangle_of_height_at_most_one() {
        let mel = mel_filters();
        assert_eq!(mel.len(), MEL_BINS);
        assert!(
            mel.iter()
                .all(|f| f.weights.iter().all(|&w| w > 0.0 && w <= 1.0))
        );
        assert!(mel[1..].windows(2).all(|w| w[0].first <= w[1].first));
        // As transformers' bank: the lowest filter lies between bins 0 and 1 (31.25 Hz apart)
        // and has no weight; the next ones a bin or two; the top one 11 bins.
        let widths: Vec<usize> = mel.iter().map(|f| f.weights.len()).collect();
        assert_eq!(widths[..13], [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
        assert_eq!(widths[127], 11);
    }

    #[test]
    fn a_long_piece_is_cut_to_thirty_seconds() {
        assert_eq!(features(&vec![0.0; PIECE_SAMPLES + 5_000]).frames, 2_999);
        assert_eq!(audio_tokens(PIECE_SAMPLES), 750);
        assert_eq!(audio_tokens(2 * PIECE_SAMPLES), 750);
    }
}
