//! Sound against transformers (`tests/fixtures/make_audio_features.py`): each clip decoded and
//! resampled as `load_audio` (libsndfile, soxr HQ) does it, `Gemma4AudioFeatureExtractor`'s
//! features and mask of transformers' own samples and of ours, the soft-token counts; and the
//! files that must be refused, refused without a panic. Differences measured, printed, bounded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gemma_media::audio::decode::decode;
use gemma_media::audio::{
    AudioError, Clip, MEL_BINS, PIECE_SAMPLES, SAMPLE_RATE, audio_tokens, features,
};
use safetensors::SafeTensors;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/audio/features")
}

/// The reference: per clip its samples, features and mask; the listing.
struct Reference {
    tensors: HashMap<String, Vec<u8>>,
    listing: serde_json::Value,
}

impl Reference {
    fn load() -> Self {
        let bytes = std::fs::read(dir().join("reference.safetensors")).expect("reference");
        let st = SafeTensors::deserialize(&bytes).expect("safetensors");
        let tensors = st
            .tensors()
            .into_iter()
            .map(|(name, view)| (name, view.data().to_vec()))
            .collect();
        let listing =
            serde_json::from_slice(&std::fs::read(dir().join("reference.json")).expect("listing"))
                .expect("json");
        Self { tensors, listing }
    }

    fn clips(&self) -> Vec<String> {
        let clips = self.listing["clips"].as_object().expect("clips");
        clips.keys().cloned().collect()
    }

    fn floats(&self, name: &str) -> Vec<f32> {
        let bytes = &self.tensors[name];
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn mask(&self, clip: &str) -> Vec<bool> {
        self.tensors[&format!("{clip}.mask")]
            .iter()
            .map(|&b| b != 0)
            .collect()
    }
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The largest difference of `a` and `b` below `hz` (16 kHz samples; frequencies at and above cut
/// off in one FFT of the whole difference), away from the ends (100 samples, where the two
/// resamplers start and stop differently).
fn in_band_difference(a: &[f32], b: &[f32], hz: f64) -> f32 {
    let n = a.len();
    let mut d: Vec<f64> = a.iter().zip(b).map(|(x, y)| f64::from(x - y)).collect();
    let mut planner = realfft::RealFftPlanner::<f64>::new();
    let mut spectrum = planner.plan_fft_forward(n).make_output_vec();
    planner
        .plan_fft_forward(n)
        .process(&mut d, &mut spectrum)
        .expect("lengths");
    for (k, bin) in spectrum.iter_mut().enumerate() {
        if k as f64 * f64::from(SAMPLE_RATE) / n as f64 >= hz {
            *bin = Default::default();
        }
    }
    planner
        .plan_fft_inverse(n)
        .process(&mut spectrum, &mut d)
        .expect("lengths");
    d[100..n - 100]
        .iter()
        .map(|v| (v / n as f64).abs() as f32)
        .fold(0.0, f32::max)
}

/// How many of the lowest mel bins lie wholly below `hz` (HTK corners from 0 to 8 kHz).
fn bins_below(hz: f64) -> usize {
    let top = 2595.0 * (1.0 + 8000.0 / 700.0f64).log10();
    let corner = |i: usize| 700.0 * (10f64.powf(i as f64 * top / 129.0 / 2595.0) - 1.0);
    (0..MEL_BINS).take_while(|&m| corner(m + 2) < hz).count()
}

/// The largest difference of two feature rows' first `bins` values.
fn low_bins_difference(a: &[f32], b: &[f32], bins: usize) -> f32 {
    a.chunks(MEL_BINS)
        .zip(b.chunks(MEL_BINS))
        .map(|(x, y)| max_difference(&x[..bins], &y[..bins]))
        .fold(0.0, f32::max)
}

fn rms_difference(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    (sum / a.len().max(1) as f64).sqrt() as f32
}

/// What a clip decoded and resampled here may differ from transformers' by, about twice what
/// was measured (in the comments): samples (largest, root mean square, largest below 90 % of the
/// lower Nyquist), then features from them (largest, mean, largest in the mel bins below that).
/// The largest come where a chirp at 0.45 full scale crosses soxr's transition band (0.913 to 1
/// × the lower Nyquist), whose shape rubato's filter only approaches.
fn bounds(clip: &str) -> [[f32; 3]; 2] {
    match clip {
        // Read as they are: the same integers scaled the same way (0; 4.8e-7, 2.5e-8, 4.8e-7).
        "chirp_16k.wav" | "half_second.wav" | "odd_12345.wav" => {
            [[0.0, 0.0, 0.0], [1e-6, 5e-8, 1e-6]]
        }
        // 3.4e-3, 4.5e-4, 1.2e-3; 0.105, 5.5e-4, 0.011.
        "chirp_22k.wav" => [[7e-3, 9e-4, 2.4e-3], [0.21, 1.1e-3, 0.021]],
        // 4.2e-3, 3.1e-4, 6.8e-4; 0.135, 7.2e-4, 0.042.
        "chirp_44k_stereo.wav" => [[8.4e-3, 6.3e-4, 1.4e-3], [0.27, 1.5e-3, 0.084]],
        // 2.6e-3, 2.1e-4, 5.1e-4; 0.101, 4.0e-4, 1.8e-3.
        "chirp_48k.flac" => [[5.2e-3, 4.2e-4, 1e-3], [0.2, 8e-4, 3.5e-3]],
        // Upsampled: 1.8e-3, 5.2e-4, 1.6e-3; 0.19, 1.0e-3, 5.5e-3.
        "chirp_8k.wav" => [[3.5e-3, 1.05e-3, 3.2e-3], [0.38, 2e-3, 0.011]],
        // Lossy, decoded by symphonia here and by libsndfile (mpg123, libvorbis) there.
        // 4.5e-3, 3.1e-4, 6.5e-4; 0.148, 6.5e-4, 0.020.
        "chirp_44k.mp3" => [[9.1e-3, 6.3e-4, 1.3e-3], [0.3, 1.3e-3, 0.04]],
        // 5.5e-4, 3.9e-5, 3.6e-4; 0.097, 4.1e-4, 1.6e-3.
        "speech.ogg" => [[1.1e-3, 8e-5, 7.2e-4], [0.19, 8.2e-4, 3.3e-3]],
        _ => panic!("no bound for {clip}"),
    }
}

#[test]
fn features_of_transformers_samples_are_transformers_features() {
    let reference = Reference::load();
    let mut most = 0.0f32;
    for clip in reference.clips() {
        let samples = reference.floats(&format!("{clip}.samples"));
        let theirs = reference.floats(&format!("{clip}.features"));
        let ours = features(&samples);
        assert_eq!(ours.frames * MEL_BINS, theirs.len(), "{clip}");
        assert_eq!(ours.mask, reference.mask(&clip), "{clip}");
        let d = max_difference(&ours.values, &theirs);
        println!("{clip}: features of transformers' samples differ by at most {d:e}");
        most = most.max(d);
    }
    // Measured 4.8e-7 (numpy's f32 FFT against an f64 one: one f32 step at the largest values).
    assert!(most <= 1e-6, "features differ by {most:e}");
}

#[test]
fn files_decode_and_resample_as_transformers_loads_them() {
    let reference = Reference::load();
    for clip in reference.clips() {
        let ours = Clip::open(&dir().join(&clip)).expect("decodes");
        // What a chip shows without resampling: the same length and soft tokens.
        let probe = gemma_media::audio::Probe::open(&dir().join(&clip)).expect("probes");
        assert_eq!(probe.samples, ours.samples().len(), "{clip}: probed length");
        let tokens: usize = ours.pieces().map(|p| audio_tokens(p.len())).sum();
        assert_eq!((probe.tokens(), probe.pieces()), (tokens, 1), "{clip}");
        let theirs = reference.floats(&format!("{clip}.samples"));
        let listed = &reference.listing["clips"][&clip];
        assert_eq!(Some(u64::from(ours.source_rate())), listed["rate"].as_u64());
        assert_eq!(ours.samples().len(), theirs.len(), "{clip}: length");
        let d = max_difference(ours.samples(), &theirs);
        let r = rms_difference(ours.samples(), &theirs);
        // Below 90 % of the lower Nyquist, short of soxr's transition band.
        let band = 0.9 * f64::from(ours.source_rate().min(SAMPLE_RATE)) / 2.0;
        let b = in_band_difference(ours.samples(), &theirs, band);
        println!(
            "{clip}: samples differ from soundfile + soxr by at most {d:e}, rms {r:e}; below {band} Hz {b:e}"
        );
        let [samples, features_bound] = bounds(&clip);
        assert!(
            d <= samples[0] && r <= samples[1] && b <= samples[2],
            "{clip}: samples differ by {d:e}, rms {r:e}, in band {b:e}"
        );
        let f = features(ours.samples());
        let theirs = reference.floats(&format!("{clip}.features"));
        let e = max_difference(&f.values, &theirs);
        let mean = f
            .values
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .sum::<f32>()
            / theirs.len().max(1) as f32;
        let low = bins_below(band);
        let l = low_bins_difference(&f.values, &theirs, low);
        println!(
            "{clip}: features from the file differ by at most {e:e}, mean {mean:e}; in the {low} bins below {band} Hz {l:e}"
        );
        assert_eq!(f.mask, reference.mask(&clip), "{clip}");
        assert!(
            e <= features_bound[0] && mean <= features_bound[1] && l <= features_bound[2],
            "{clip}: features differ by {e:e}, mean {mean:e}, low bins {l:e}"
        );
    }
}

#[test]
fn soft_token_counts_are_the_processors() {
    let reference = Reference::load();
    for (length, count) in reference.listing["audio_tokens"]
        .as_object()
        .expect("table")
    {
        let length: usize = length.parse().expect("a length");
        assert_eq!(
            Some(audio_tokens(length) as u64),
            count.as_u64(),
            "{length} samples"
        );
    }
    for clip in reference.clips() {
        let listed = &reference.listing["clips"][&clip];
        let samples = listed["samples"].as_u64().expect("samples") as usize;
        assert_eq!(
            Some(audio_tokens(samples) as u64),
            listed["audio_tokens"].as_u64()
        );
        // The count the processor writes into the prompt, from the mask, is the same.
        assert_eq!(listed["mask_tokens"], listed["audio_tokens"], "{clip}");
    }
}

#[test]
fn frames_and_mask_are_the_extractors_for_any_length() {
    let reference = Reference::load();
    for (length, shape) in reference.listing["shapes"].as_object().expect("shapes") {
        let length: usize = length.parse().expect("a length");
        let f = features(&vec![0.1; length]);
        let kept = f.mask.iter().filter(|&&m| m).count() as u64;
        // The frames the mask keeps come first.
        assert!(f.mask.iter().skip(kept as usize).all(|&m| !m), "{length}");
        let ours = [Some(f.frames as u64), Some(kept)];
        assert_eq!(
            ours,
            [shape[0].as_u64(), shape[1].as_u64()],
            "{length} samples"
        );
    }
}

#[test]
fn a_long_recording_comes_in_pieces_of_thirty_seconds() {
    let tone: Vec<f32> = (0..65 * 44_100)
        .map(|i| (i as f32 * 0.05).sin() * 0.5)
        .collect();
    let clip = Clip::from_samples(&tone, 44_100, 1).expect("a clip");
    let pieces: Vec<usize> = clip.pieces().map(<[f32]>::len).collect();
    assert_eq!(
        pieces,
        [PIECE_SAMPLES, PIECE_SAMPLES, 5 * SAMPLE_RATE as usize]
    );
    let last = clip.pieces().last().expect("a piece");
    assert_eq!(audio_tokens(last.len()), 125);
    // The chip's count without resampling: the same pieces and tokens.
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("long.wav");
    let mut wav = wav_header(44_100, 1, tone.len() as u32);
    wav.extend(
        tone.iter()
            .flat_map(|&s| ((s * 32_767.0) as i16).to_le_bytes()),
    );
    std::fs::write(&path, wav).expect("write");
    let probe = gemma_media::audio::Probe::open(&path).expect("probes");
    assert_eq!(probe.samples, clip.samples().len());
    assert_eq!(probe.pieces(), 3);
    let tokens: usize = clip.pieces().map(|p| audio_tokens(p.len())).sum();
    assert_eq!(probe.tokens(), tokens);
}

/// A 16-bit PCM WAV header for `frames` frames of `channels` at `rate` (the data follows).
fn wav_header(rate: u32, channels: u16, frames: u32) -> Vec<u8> {
    let data = frames * u32::from(channels) * 2;
    let mut h = Vec::new();
    h.extend(b"RIFF");
    h.extend((36 + data).to_le_bytes());
    h.extend(b"WAVEfmt ");
    h.extend(16u32.to_le_bytes());
    h.extend(1u16.to_le_bytes());
    h.extend(channels.to_le_bytes());
    h.extend(rate.to_le_bytes());
    h.extend((rate * u32::from(channels) * 2).to_le_bytes());
    h.extend((channels * 2).to_le_bytes());
    h.extend(16u16.to_le_bytes());
    h.extend(b"data");
    h.extend(data.to_le_bytes());
    h
}

/// A small valid WAV: a second of a tone at 8 kHz.
fn small_wav() -> Vec<u8> {
    let mut bytes = wav_header(8_000, 1, 8_000);
    for i in 0..8_000 {
        let s = ((i as f32 * 0.1).sin() * 12_000.0) as i16;
        bytes.extend(s.to_le_bytes());
    }
    bytes
}

#[test]
fn files_that_are_no_sound_are_refused_by_name() {
    let refused = |bytes: &[u8], name: &str| {
        let e = Clip::decode(bytes, name).expect_err(name);
        println!("{e}");
        assert!(e.to_string().starts_with(&format!("{name}: ")), "{e}");
        e
    };
    let with_data = |header: Vec<u8>, bytes: usize| [header, vec![0; bytes]].concat();
    assert!(matches!(
        refused(b"", "empty.wav"),
        AudioError::Empty { .. }
    ));
    let none = refused(&wav_header(16_000, 1, 0), "none.wav");
    assert!(matches!(none, AudioError::Empty { .. }));
    let garbage: Vec<u8> = (0..4_096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let noise = refused(&garbage, "noise.mp3");
    assert!(matches!(noise, AudioError::NotAudio { .. }));
    let text = refused(b"These are my notes, not a recording.\n", "notes.wav");
    assert!(matches!(text, AudioError::NotAudio { .. }));
    // symphonia refuses a hundred channels itself, nine are refused here.
    let many = refused(&with_data(wav_header(16_000, 100, 10), 2_000), "many.wav");
    assert!(matches!(many, AudioError::Damaged { .. }));
    let nine = refused(&with_data(wav_header(16_000, 9, 10), 180), "nine.wav");
    assert!(matches!(nine, AudioError::Channels { channels: 9, .. }));
    let zero = refused(&with_data(wav_header(0, 1, 10), 20), "zero.wav");
    assert!(matches!(zero, AudioError::Rate { rate: 0, .. }));
    let slow = refused(&with_data(wav_header(500, 1, 10), 20), "slow.wav");
    assert!(matches!(slow, AudioError::Rate { rate: 500, .. }));
    let fast = refused(&with_data(wav_header(768_000, 1, 10), 20), "fast.wav");
    assert!(matches!(fast, AudioError::Rate { rate: 768_000, .. }));
    // A header that claims more than an hour is refused before anything is decoded.
    let long = refused(
        &with_data(wav_header(8_000, 1, 8_000 * 3_601), 20),
        "long.wav",
    );
    assert!(matches!(long, AudioError::TooLong { .. }));
    let missing = Clip::open(&dir().join("no such file.wav")).expect_err("missing");
    assert!(matches!(missing, AudioError::Read { .. }), "{missing}");
}

#[test]
fn cut_or_mangled_files_never_panic() {
    // The decoder meets the hostile bytes; what it gives the resampler is checked finite (and a
    // cut file is resampled as any other), so most cases stop before resampling.
    let wav = small_wav();
    assert!(Clip::decode(&wav, "tone.wav").is_ok());
    assert!(Clip::decode(&wav[..wav.len() / 2], "half.wav").is_ok());
    // Every cut in the header, then every 37th byte: an error or the sound up to the cut.
    for len in (0..64).chain((64..wav.len()).step_by(37)) {
        if let Ok(sound) = decode(&wav[..len], "cut.wav") {
            assert!(sound.mono.len() <= 8_000, "{len}");
        }
    }
    // Bytes overwritten at random, the same each run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..300 {
        let mut bytes = wav.clone();
        for _ in 0..1 + next() % 8 {
            let at = (next() % 64) as usize;
            bytes[at] = next() as u8;
        }
        let _ = decode(&bytes, "mangled.wav");
    }
    for file in ["chirp_48k.flac", "chirp_44k.mp3", "speech.ogg"] {
        let bytes = std::fs::read(dir().join(file)).expect("fixture");
        for len in (0..bytes.len()).step_by(997) {
            let _ = decode(&bytes[..len], file);
        }
        // Bytes overwritten anywhere in the file, headers and frames alike.
        for _ in 0..40 {
            let mut mangled = bytes.clone();
            for _ in 0..1 + next() % 16 {
                let at = (next() % mangled.len() as u64) as usize;
                mangled[at] = next() as u8;
            }
            let _ = decode(&mangled, file);
        }
    }
}

#[test]
fn a_damaged_frame_in_an_mp3_is_skipped_not_fatal() {
    let mut bytes = std::fs::read(dir().join("chirp_44k.mp3")).expect("fixture");
    let whole = Clip::decode(&bytes, "chirp_44k.mp3").expect("decodes");
    // Zeros over a frame's side information: symphonia cannot decode that frame (nor, its bit
    // reservoir gone, the next few).
    bytes[2_288..2_348].fill(0);
    let damaged = Clip::decode(&bytes, "chirp_44k.mp3").expect("still decodes");
    let (lost, of) = (
        whole.samples().len() - damaged.samples().len(),
        whole.samples().len(),
    );
    println!("{lost} of {of} samples lost");
    assert!(lost > 0 && lost < of / 5, "{lost} of {of}");
}
