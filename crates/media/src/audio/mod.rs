//! Sound as Gemma 4's audio tower takes it: a file decoded within limits ([`decode`]), made mono
//! and resampled to 16 kHz ([`rate`]) into a [`Clip`], cut into 30-second pieces, and each piece
//! turned into the log-mel features and soft-token count transformers' Gemma 4 processor makes
//! ([`features`]). Plain data in and out: no model, no microphone, no playback.

pub mod decode;
pub mod features;
pub mod rate;

use std::path::Path;

pub use features::{Features, MEL_BINS, audio_tokens, features};

/// The rate the audio tower hears, in samples a second.
pub const SAMPLE_RATE: u32 = 16_000;
/// The longest piece the feature extractor takes (30 s at [`SAMPLE_RATE`]); a longer clip is cut
/// into pieces of this many samples, each its own audio span in the prompt.
pub const PIECE_SAMPLES: usize = 480_000;
/// The longest clip read, in seconds.
pub const MAX_SECONDS: u64 = 3_600;
/// The largest sound file read.
pub const MAX_FILE: u64 = 256 << 20;
/// Most channels a clip may have.
pub const MAX_CHANNELS: usize = 8;
/// Lowest and highest source sample rates taken, in Hz.
pub const RATES: std::ops::RangeInclusive<u32> = 1_000..=384_000;
/// Most sample frames decoded at the source rate (an hour at 48 kHz): bounds the memory a
/// high-rate file takes before it is resampled.
pub const MAX_FRAMES: u64 = MAX_SECONDS * 48_000;

/// Sound that cannot be used, and why, in words a user acts on. `what` names the file (or `the
/// recording`).
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// The file cannot be read (missing, not a regular file, over [`MAX_FILE`]).
    #[error("{what}: cannot be read ({cause})")]
    Read {
        /// The file.
        what: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The bytes are no sound format gemma-chat reads.
    #[error("{what}: not a WAV, FLAC, MP3 or OGG Vorbis sound file")]
    NotAudio {
        /// The file.
        what: String,
    },
    /// A sound format gemma-chat reads, holding a codec it does not decode.
    #[error(
        "{what}: its sound is in a codec gemma-chat does not decode ({codec}); convert it to WAV, FLAC, MP3 or OGG Vorbis"
    )]
    Unsupported {
        /// The file.
        what: String,
        /// The decoder's words for the codec or feature.
        codec: String,
    },
    /// The decoder failed: a truncated or corrupt file.
    #[error("{what}: the sound file is damaged ({cause})")]
    Damaged {
        /// The file.
        what: String,
        /// The decoder's words.
        cause: String,
    },
    /// No sound in it at all.
    #[error("{what}: holds no sound (zero samples)")]
    Empty {
        /// The file.
        what: String,
    },
    /// Longer than [`MAX_SECONDS`], or more than [`MAX_FRAMES`] samples at its rate.
    #[error(
        "{what}: too long (gemma-chat takes an hour at most, and above 48 kHz as many samples as an hour at 48 kHz); cut it first"
    )]
    TooLong {
        /// The file.
        what: String,
    },
    /// A sample rate outside [`RATES`].
    #[error("{what}: a sample rate of {rate} Hz is outside 1 kHz to 384 kHz")]
    Rate {
        /// The file.
        what: String,
        /// Its rate.
        rate: u32,
    },
    /// No channel, or more than [`MAX_CHANNELS`].
    #[error(
        "{what}: {channels} channels (gemma-chat takes 1 to {MAX_CHANNELS}); mix it down first"
    )]
    Channels {
        /// The file.
        what: String,
        /// Its channel count.
        channels: usize,
    },
    /// A sample that is NaN or infinite (a float file gone wrong).
    #[error("{what}: holds a sample that is not a finite number")]
    NonFinite {
        /// The file.
        what: String,
    },
}

/// The bytes of the regular file at `path` (at most [`MAX_FILE`]), and its name for messages.
fn read(path: &Path) -> Result<(Vec<u8>, String), AudioError> {
    let what = path.display().to_string();
    match gemma_files::read_limited(path, MAX_FILE) {
        Ok(bytes) => Ok((bytes, what)),
        Err(cause) => Err(AudioError::Read { what, cause }),
    }
}

/// A sound file's length and the soft tokens it makes, without resampling it (what an
/// attachment's chip shows; the resampler is the slow part of [`Clip::open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Samples once at [`SAMPLE_RATE`] (as [`Clip::open`] makes them).
    pub samples: usize,
    /// The file's own rate.
    pub source_rate: u32,
}

impl Probe {
    /// Reads and decodes the sound file at `path` as [`Clip::open`] does, all but the resampling.
    pub fn open(path: &Path) -> Result<Self, AudioError> {
        let (bytes, what) = read(path)?;
        let sound = decode::decode(&bytes, &what)?;
        if sound.mono.is_empty() {
            return Err(AudioError::Empty { what });
        }
        Ok(Self {
            samples: rate::length_at_16k(sound.mono.len(), sound.rate),
            source_rate: sound.rate,
        })
    }

    /// How long it lasts.
    pub fn seconds(&self) -> f32 {
        self.samples as f32 / SAMPLE_RATE as f32
    }

    /// Its 30-second pieces.
    pub fn pieces(&self) -> usize {
        self.samples.div_ceil(PIECE_SAMPLES)
    }

    /// Soft tokens, every piece's together.
    pub fn tokens(&self) -> usize {
        (0..self.pieces())
            .map(|i| features::audio_tokens((self.samples - i * PIECE_SAMPLES).min(PIECE_SAMPLES)))
            .sum()
    }
}

/// Mono sound at [`SAMPLE_RATE`], as the feature extractor takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    samples: Vec<f32>,
    source_rate: u32,
}

impl Clip {
    /// Reads and decodes the sound file at `path` (a regular file of at most [`MAX_FILE`]).
    pub fn open(path: &Path) -> Result<Self, AudioError> {
        let (bytes, what) = read(path)?;
        Self::decode(&bytes, &what)
    }

    /// Decodes the WAV, FLAC, MP3 or OGG Vorbis file in `bytes`; `name` names it in errors and
    /// its extension hints at the format.
    pub fn decode(bytes: &[u8], name: &str) -> Result<Self, AudioError> {
        let sound = decode::decode(bytes, name)?;
        Ok(Self {
            samples: rate::to_16k(&sound.mono, sound.rate, name)?,
            source_rate: sound.rate,
        })
    }

    /// A clip of interleaved `samples` (`channels` of them a frame; a trailing partial frame is
    /// dropped) at `rate`, e.g. from a microphone: checked as a file is, then mixed to mono (the
    /// mean of the channels) and resampled.
    pub fn from_samples(samples: &[f32], rate: u32, channels: usize) -> Result<Self, AudioError> {
        let what = "the recording";
        decode::check_format(what, rate, channels)?;
        if samples.is_empty() || samples.len() < channels {
            return Err(AudioError::Empty { what: what.into() });
        }
        if (samples.len() / channels) as u64 > frame_limit(rate) {
            return Err(AudioError::TooLong { what: what.into() });
        }
        if samples.iter().any(|s| !s.is_finite()) {
            return Err(AudioError::NonFinite { what: what.into() });
        }
        let mut mono = Vec::with_capacity(samples.len() / channels);
        decode::mix_into(&mut mono, samples, channels);
        Ok(Self {
            samples: rate::to_16k(&mono, rate, what)?,
            source_rate: rate,
        })
    }

    /// The samples at [`SAMPLE_RATE`], in -1..1 (a decoded file is not clipped or normalised).
    pub fn samples(&self) -> &[f32] {
        &self.samples
    }

    /// How long the clip lasts.
    pub fn seconds(&self) -> f32 {
        self.samples.len() as f32 / SAMPLE_RATE as f32
    }

    /// The rate the sound had before it was resampled.
    pub fn source_rate(&self) -> u32 {
        self.source_rate
    }

    /// The clip in pieces of [`PIECE_SAMPLES`] (30 s), the last one shorter: each is one audio
    /// span in the prompt.
    pub fn pieces(&self) -> impl Iterator<Item = &[f32]> {
        self.samples.chunks(PIECE_SAMPLES)
    }

    /// The clip as a 16 kHz mono WAV file of 32-bit float samples (what [`Clip::decode`] reads
    /// back to the same samples): a recording kept on disk.
    pub fn to_wav(&self) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: SAMPLE_RATE,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut out = std::io::Cursor::new(Vec::with_capacity(self.samples.len() * 4 + 64));
        // Writing to memory fails only past hound's 4 GiB WAV limit, which a clip of at most an
        // hour (230 MB) never reaches.
        let written = hound::WavWriter::new(&mut out, spec).and_then(|mut w| {
            self.samples.iter().try_for_each(|&s| w.write_sample(s))?;
            w.finalize()
        });
        debug_assert!(written.is_ok(), "an hour of 16 kHz fits a WAV file");
        out.into_inner()
    }
}

/// Most frames taken at `rate`: an hour, and at most [`MAX_FRAMES`].
pub(crate) fn frame_limit(rate: u32) -> u64 {
    (MAX_SECONDS * u64::from(rate)).min(MAX_FRAMES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_clip_comes_in_thirty_second_pieces() {
        let clip = Clip::from_samples(&vec![0.25; 65 * 16_000], SAMPLE_RATE, 1).expect("a clip");
        let lengths: Vec<usize> = clip.pieces().map(<[f32]>::len).collect();
        assert_eq!(lengths, [480_000, 480_000, 80_000]);
        assert_eq!(clip.seconds(), 65.0);
    }

    #[test]
    fn a_stereo_recording_is_the_mean_of_its_channels() {
        let clip = Clip::from_samples(&[0.5, -0.25, 1.0, 0.0], SAMPLE_RATE, 2).expect("a clip");
        assert_eq!(clip.samples(), [0.125, 0.5]);
        assert_eq!(clip.source_rate(), SAMPLE_RATE);
    }

    #[test]
    fn a_recording_kept_as_wav_reads_back_the_same() {
        let samples: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.01).sin() * 0.7).collect();
        let clip = Clip::from_samples(&samples, SAMPLE_RATE, 1).expect("a clip");
        let back = Clip::decode(&clip.to_wav(), "kept.wav").expect("reads back");
        assert_eq!(back.samples(), clip.samples());
    }

    #[test]
    fn recordings_that_cannot_be_used_are_refused() {
        let refused = |s: &[f32], rate, channels| Clip::from_samples(s, rate, channels).err();
        assert!(matches!(
            refused(&[], 16_000, 1),
            Some(AudioError::Empty { .. })
        ));
        assert!(matches!(
            refused(&[0.1], 16_000, 2),
            Some(AudioError::Empty { .. })
        ));
        assert!(matches!(
            refused(&[0.1], 500, 1),
            Some(AudioError::Rate { rate: 500, .. })
        ));
        assert!(matches!(
            refused(&[0.1; 9], 16_000, 9),
            Some(AudioError::Channels { .. })
        ));
        assert!(matches!(
            refused(&[0.1; 2], 16_000, 0),
            Some(AudioError::Channels { .. })
        ));
        assert!(matches!(
            refused(&[0.1, f32::NAN], 16_000, 1),
            Some(AudioError::NonFinite { .. })
        ));
        let hour_and_a_bit = vec![0.0; 1_000 * 3_601];
        assert!(matches!(
            refused(&hour_and_a_bit, 1_000, 1),
            Some(AudioError::TooLong { .. })
        ));
    }
}
