//! The default input device through `cpal`: a thread owns the stream (a platform's stream need
//! not be `Send`), the callback downmixes to mono and meters, and stopping hands the samples
//! back.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};

use super::{MAX_SECONDS, Meter, MicError, Microphone, Recording, Take, downmix};

/// The host's default input device.
#[derive(Debug)]
pub(super) struct Default;

impl Microphone for Default {
    fn start(&self) -> Result<Box<dyn Recording>, MicError> {
        let meter = Arc::new(Meter::default());
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = channel();
        let (stop_tx, stop_rx) = channel::<()>();
        let (m, s) = (meter.clone(), samples.clone());
        let thread = std::thread::Builder::new()
            .name("gemma-chat-mic".into())
            .spawn(move || run(&m, &s, &ready_tx, &stop_rx))
            .map_err(|e| MicError::Stream(e.to_string()))?;
        let rate = ready_rx
            .recv()
            .map_err(|_| MicError::Stream("the recording thread ended".into()))??;
        Ok(Box::new(Live {
            meter,
            samples,
            rate,
            stop: stop_tx,
            thread: Some(thread),
        }))
    }
}

/// Opens the default input device, streams into `samples` until told to stop; reports the rate
/// (or why it cannot record) on `ready`.
fn run(
    meter: &Arc<Meter>,
    samples: &Arc<Mutex<Vec<f32>>>,
    ready: &Sender<Result<u32, MicError>>,
    stop: &Receiver<()>,
) {
    // ALSA prints its own errors to stderr, which is the TUI's screen: none while it opens (our
    // error says what went wrong).
    let quiet = gag::Gag::stderr().ok();
    let opened =
        open(meter.clone(), samples.clone()).and_then(|(stream, rate)| match stream.play() {
            Ok(()) => Ok((stream, rate)),
            Err(e) => Err(MicError::Stream(e.to_string())),
        });
    drop(quiet);
    match opened {
        Ok((stream, rate)) => {
            let _ = ready.send(Ok(rate));
            // Until stopped, or the recording is dropped.
            let _ = stop.recv();
            drop(stream);
        }
        Err(e) => {
            let _ = ready.send(Err(e));
        }
    }
}

/// The default input stream, its callback appending mono samples (up to [`MAX_SECONDS`]).
fn open(meter: Arc<Meter>, samples: Arc<Mutex<Vec<f32>>>) -> Result<(cpal::Stream, u32), MicError> {
    let host = cpal::default_host();
    let device = host
        .default_input_device()
        .ok_or_else(|| MicError::NoDevice(format!("{} has no default input", host.id().name())))?;
    let supported = device
        .default_input_config()
        .map_err(|e| MicError::NoDevice(e.to_string()))?;
    let format = supported.sample_format();
    let config: cpal::StreamConfig = supported.into();
    let rate = config.sample_rate.0;
    let channels = usize::from(config.channels);
    let limit = (MAX_SECONDS * rate as f32) as usize;
    let push = move |frames: &mut dyn Iterator<Item = f32>| {
        let Ok(mut all) = samples.lock() else { return };
        if all.len() >= limit {
            return;
        }
        let before = all.len();
        let level = downmix(frames, channels, &mut all);
        all.truncate(limit);
        meter.record(all.len() - before, level);
    };
    // Never printed (stderr is the TUI's screen): a stream that fails records nothing, and
    // stopping it says so.
    let err = |_: cpal::StreamError| {};
    let stream = match format {
        cpal::SampleFormat::F32 => device.build_input_stream(
            &config,
            move |d: &[f32], _: &_| push(&mut d.iter().copied()),
            err,
            None,
        ),
        cpal::SampleFormat::I16 => device.build_input_stream(
            &config,
            move |d: &[i16], _: &_| push(&mut d.iter().map(|&s| f32::from(s) / 32_768.0)),
            err,
            None,
        ),
        cpal::SampleFormat::U16 => device.build_input_stream(
            &config,
            move |d: &[u16], _: &_| {
                push(&mut d.iter().map(|&s| (f32::from(s) - 32_768.0) / 32_768.0))
            },
            err,
            None,
        ),
        cpal::SampleFormat::I32 => device.build_input_stream(
            &config,
            move |d: &[i32], _: &_| push(&mut d.iter().map(|&s| s as f32 / 2_147_483_648.0)),
            err,
            None,
        ),
        other => {
            return Err(MicError::Stream(format!(
                "the device records {other} samples, which gemma-chat does not read"
            )));
        }
    }
    .map_err(|e| MicError::Stream(e.to_string()))?;
    Ok((stream, rate))
}

/// A recording from the default device.
#[derive(Debug)]
struct Live {
    meter: Arc<Meter>,
    samples: Arc<Mutex<Vec<f32>>>,
    rate: u32,
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Recording for Live {
    fn level(&self) -> f32 {
        self.meter.level()
    }

    fn seconds(&self) -> f32 {
        self.meter.seconds(self.rate)
    }

    fn finish(mut self: Box<Self>) -> Result<Take, MicError> {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let samples = std::mem::take(&mut *self.samples.lock().map_err(|_| MicError::Empty)?);
        if samples.is_empty() {
            return Err(MicError::Empty);
        }
        Ok(Take {
            samples,
            rate: self.rate,
        })
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}
