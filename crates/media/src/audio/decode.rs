//! A sound file's bytes to mono samples at its own rate, through symphonia (WAV with PCM, float or
//! ADPCM samples, FLAC, MP3, OGG Vorbis), as libsndfile reads them for transformers: integer
//! samples scaled by 2^-(bits-1), channels averaged. Every limit is checked before the memory it
//! guards is taken; hostile bytes give an [`AudioError`], never a panic.

use std::io::Cursor;

use symphonia::core::codecs::audio::{AudioCodecParameters, AudioDecoderOptions};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, FormatReader, TrackType};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;

use super::{AudioError, MAX_CHANNELS, RATES, frame_limit};

/// Decoded sound: one channel at the file's rate.
#[derive(Debug)]
pub struct Sound {
    /// The samples, the mean of the file's channels.
    pub mono: Vec<f32>,
    /// The file's sample rate, in Hz.
    pub rate: u32,
}

/// Decodes `bytes` (a whole sound file; `name` names it in errors and hints at its format).
pub fn decode(bytes: &[u8], name: &str) -> Result<Sound, AudioError> {
    let what = || name.to_string();
    if bytes.is_empty() {
        return Err(AudioError::Empty { what: what() });
    }
    let mut format = probe(bytes, name)?;
    let (track_id, params) = header(format.as_ref(), name)?;
    let mut rate = params.sample_rate.unwrap_or(0);
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| failure(name, e))?;
    let mut mono = Vec::new();
    let mut interleaved: Vec<f32> = Vec::new();
    let mut skipped = None;
    loop {
        let packet = match format.next_packet() {
            Ok(Some(packet)) => packet,
            // A file cut short ends where its bytes do, as libsndfile reads it; a chained OGG
            // stream ends with its first part.
            Ok(None) | Err(SymphoniaError::ResetRequired) => break,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break;
            }
            Err(e) => return Err(failure(name, e)),
        };
        if packet.track_id != track_id {
            continue;
        }
        let buffer = match decoder.decode(&packet) {
            Ok(buffer) => buffer,
            // One bad packet (an MP3 frame whose bit reservoir is missing) is skipped, as
            // symphonia advises; a file of nothing else is damaged.
            Err(SymphoniaError::DecodeError(cause)) => {
                skipped.get_or_insert(cause);
                continue;
            }
            Err(e) => return Err(failure(name, e)),
        };
        let spec = buffer.spec();
        let channels = spec.channels().count();
        check_format(name, spec.rate(), channels)?;
        if rate != 0 && rate != spec.rate() {
            return Err(damaged(name, "the sample rate changes part way"));
        }
        rate = spec.rate();
        if (mono.len() + buffer.frames()) as u64 > frame_limit(rate) {
            return Err(AudioError::TooLong { what: what() });
        }
        buffer.copy_to_vec_interleaved(&mut interleaved);
        if interleaved.iter().any(|s| !s.is_finite()) {
            return Err(AudioError::NonFinite { what: what() });
        }
        mix_into(&mut mono, &interleaved, channels);
    }
    match skipped {
        Some(cause) if mono.is_empty() => Err(damaged(name, cause)),
        _ if mono.is_empty() => Err(AudioError::Empty { what: what() }),
        _ => Ok(Sound { mono, rate }),
    }
}

/// The audio track's id and codec parameters, once what its header says (rate, channels,
/// length) is within the limits: checked before anything is decoded.
fn header(
    format: &dyn FormatReader,
    name: &str,
) -> Result<(u32, AudioCodecParameters), AudioError> {
    let not_audio = || AudioError::NotAudio { what: name.into() };
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(not_audio)?;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(not_audio)?;
    if let (Some(rate), Some(channels)) = (params.sample_rate, &params.channels) {
        check_format(name, rate, channels.count())?;
        if track.num_frames.is_some_and(|n| n > frame_limit(rate)) {
            return Err(AudioError::TooLong { what: name.into() });
        }
    }
    Ok((track.id, params.clone()))
}

/// Refuses a rate outside [`RATES`] or a channel count outside 1..=[`MAX_CHANNELS`].
pub(crate) fn check_format(what: &str, rate: u32, channels: usize) -> Result<(), AudioError> {
    if !RATES.contains(&rate) {
        return Err(AudioError::Rate {
            what: what.into(),
            rate,
        });
    }
    if channels == 0 || channels > MAX_CHANNELS {
        return Err(AudioError::Channels {
            what: what.into(),
            channels,
        });
    }
    Ok(())
}

/// Appends the mean of each frame of `interleaved` (`channels` samples a frame) to `mono`: summed
/// in f32 channel by channel, then divided, as numpy's `mean(axis=0)` of float32 rows.
pub(crate) fn mix_into(mono: &mut Vec<f32>, interleaved: &[f32], channels: usize) {
    if channels == 1 {
        mono.extend_from_slice(interleaved);
        return;
    }
    let n = channels as f32;
    mono.extend(
        interleaved
            .chunks_exact(channels)
            .map(|frame| frame.iter().fold(0.0f32, |sum, &s| sum + s) / n),
    );
}

/// A reader for `bytes` once their header shows a format symphonia reads.
fn probe<'a>(bytes: &'a [u8], name: &str) -> Result<Box<dyn FormatReader + 'a>, AudioError> {
    let stream = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let mut hint = Hint::new();
    if let Some(extension) = std::path::Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
    {
        hint.with_extension(extension);
    }
    symphonia::default::get_probe()
        .probe(
            &hint,
            stream,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| match e {
            SymphoniaError::Unsupported(_) | SymphoniaError::IoError(_) => AudioError::NotAudio {
                what: name.to_string(),
            },
            e => failure(name, e),
        })
}

/// A symphonia error in a user's words.
fn failure(what: &str, e: SymphoniaError) -> AudioError {
    match e {
        SymphoniaError::Unsupported(feature) => AudioError::Unsupported {
            what: what.into(),
            codec: feature.into(),
        },
        SymphoniaError::LimitError(_) => AudioError::TooLong { what: what.into() },
        e => damaged(what, &e.to_string()),
    }
}

fn damaged(what: &str, cause: &str) -> AudioError {
    AudioError::Damaged {
        what: what.into(),
        cause: cause.into(),
    }
}
