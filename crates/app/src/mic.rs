//! The microphone for push-to-talk: a recording from the default input device, its level and
//! length while it runs, and the samples when it stops ([`Microphone`], [`Recording`]). The
//! device is reached through `cpal` in builds with the `mic` feature (on Linux it needs ALSA's
//! `libasound2-dev` to build); other builds, and machines without an input device, get a
//! [`MicError`] that says so. The stream runs on a thread of its own, so that a recording is
//! `Send` wherever the platform's stream is not.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Longest recording kept, in seconds: push-to-talk stops itself there.
pub const MAX_SECONDS: f32 = 600.0;

/// Why the microphone gave nothing.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MicError {
    /// The binary was built without microphone support.
    #[error(
        "this gemma-chat was built without microphone support: rebuild with `--features mic` \
         (on Linux it needs ALSA's headers: apt-get install libasound2-dev), or attach a \
         recording with /attach FILE.wav"
    )]
    NotBuilt,
    /// The system has no input device.
    #[error("no microphone found ({0}): plug one in, or attach a recording with /attach FILE.wav")]
    NoDevice(String),
    /// The device refused to record.
    #[error("the microphone cannot record: {0}")]
    Stream(String),
    /// The recording holds no sound.
    #[error("nothing was recorded (the microphone sent no samples)")]
    Empty,
}

/// What a recording took: interleaved samples at the device's rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Take {
    /// Mono samples in [-1, 1] (channels averaged as they came).
    pub samples: Vec<f32>,
    /// The device's sample rate.
    pub rate: u32,
}

/// A source of recordings.
pub trait Microphone: Send + std::fmt::Debug {
    /// Starts recording.
    fn start(&self) -> Result<Box<dyn Recording>, MicError>;
}

/// A recording in progress.
pub trait Recording: Send + std::fmt::Debug {
    /// The loudness of the last tenth of a second, 0 to 1 (RMS).
    fn level(&self) -> f32;
    /// Seconds recorded so far.
    fn seconds(&self) -> f32;
    /// Stops it and hands over what it took.
    fn finish(self: Box<Self>) -> Result<Take, MicError>;
}

/// The system's default microphone, or one that says why there is none in this build.
pub fn system() -> Box<dyn Microphone> {
    #[cfg(feature = "mic")]
    {
        Box::new(device::Default)
    }
    #[cfg(not(feature = "mic"))]
    {
        Box::new(NotBuilt)
    }
}

/// The microphone of a build without the `mic` feature.
#[cfg(not(feature = "mic"))]
#[derive(Debug)]
struct NotBuilt;

#[cfg(not(feature = "mic"))]
impl Microphone for NotBuilt {
    fn start(&self) -> Result<Box<dyn Recording>, MicError> {
        Err(MicError::NotBuilt)
    }
}

/// Level and length shared between a stream's callback and the UI: written by the callback,
/// read on each frame.
#[derive(Debug, Default)]
pub struct Meter {
    /// The last level, as `f32` bits.
    level: AtomicU32,
    /// Mono samples taken.
    taken: AtomicU64,
}

impl Meter {
    /// Counts `n` more samples whose RMS is `level`.
    pub fn record(&self, n: usize, level: f32) {
        self.taken.fetch_add(n as u64, Ordering::Relaxed);
        self.level.store(level.to_bits(), Ordering::Relaxed);
    }

    /// The last level.
    pub fn level(&self) -> f32 {
        f32::from_bits(self.level.load(Ordering::Relaxed))
    }

    /// Seconds taken at `rate`.
    pub fn seconds(&self, rate: u32) -> f32 {
        self.taken.load(Ordering::Relaxed) as f32 / rate.max(1) as f32
    }
}

/// Averages interleaved `frames` of `channels` into `out` (mono) and returns their RMS.
pub fn downmix(frames: impl Iterator<Item = f32>, channels: usize, out: &mut Vec<f32>) -> f32 {
    let channels = channels.max(1);
    let (mut acc, mut k, mut energy, mut n) = (0.0f32, 0, 0.0f64, 0usize);
    for s in frames {
        acc += if s.is_finite() {
            s.clamp(-1.0, 1.0)
        } else {
            0.0
        };
        k += 1;
        if k == channels {
            let m = acc / channels as f32;
            out.push(m);
            energy += f64::from(m * m);
            n += 1;
            acc = 0.0;
            k = 0;
        }
    }
    if n == 0 {
        0.0
    } else {
        (energy / n as f64).sqrt() as f32
    }
}

#[cfg(feature = "mic")]
mod device;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stereo_is_averaged_and_its_level_measured() {
        let mut out = Vec::new();
        let rms = downmix(
            [0.5, -0.5, 1.0, 1.0, f32::NAN, 3.0].into_iter(),
            2,
            &mut out,
        );
        assert_eq!(out, vec![0.0, 1.0, 0.5]);
        let want = ((0.0 + 1.0 + 0.25) / 3.0f32).sqrt();
        assert!((rms - want).abs() < 1e-6, "{rms} vs {want}");
        let m = Meter::default();
        m.record(16_000, 0.25);
        m.record(8_000, 0.5);
        assert_eq!(m.seconds(16_000), 1.5);
        assert_eq!(m.level(), 0.5);
    }

    #[cfg(feature = "mic")]
    #[test]
    fn the_default_device_records_or_says_why() {
        // CI machines have no sound card: the error must be ours, never a panic or a hang.
        match system().start() {
            Ok(r) => {
                std::thread::sleep(std::time::Duration::from_millis(200));
                match r.finish() {
                    Ok(take) => assert!(take.rate > 0 && !take.samples.is_empty()),
                    Err(e) => assert_eq!(e, MicError::Empty),
                }
            }
            Err(e) => assert!(
                matches!(e, MicError::NoDevice(_) | MicError::Stream(_)),
                "{e}"
            ),
        }
    }

    #[cfg(not(feature = "mic"))]
    #[test]
    fn a_build_without_the_feature_says_how_to_get_it() {
        let err = system().start().expect_err("no microphone in this build");
        assert_eq!(err, MicError::NotBuilt);
        assert!(err.to_string().contains("--features mic"), "{err}");
    }
}
