//! Recordings in the app: `/attach clip.wav` shows a chip with the clip's length and soft tokens
//! and sends it as audio; push-to-talk (F5) records from a microphone (a scripted one here),
//! shows its length and level while it runs, keeps the recording as a 16 kHz WAV file and
//! attaches it; a build or machine without a microphone says why.

mod common;

use std::sync::{Arc, Mutex};

use common::{draw, key, ready_app, type_text};
use crossterm::event::KeyCode;
use gemma_app::app::{App, Msg};
use gemma_app::mic::{MicError, Microphone, Recording, Take};
use gemma_protocol::{Attachment, Command, MediaKind};

fn command(app: &mut App, line: &str) {
    type_text(app, line);
    app.update(key(KeyCode::Enter));
}

fn screen(app: &mut App) -> String {
    let t = draw(app, 110, 24);
    let buf = t.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

/// A 16 kHz mono WAV file of `seconds` of a 440 Hz tone.
fn tone(path: &std::path::Path, seconds: f32) {
    let n = (seconds * 16_000.0) as usize;
    let samples: Vec<f32> = (0..n)
        .map(|i| 0.3 * (i as f32 * 440.0 * std::f32::consts::TAU / 16_000.0).sin())
        .collect();
    let clip = gemma_media::audio::Clip::from_samples(&samples, 16_000, 1).expect("clip");
    std::fs::write(path, clip.to_wav()).expect("write");
}

/// A ready app with a tone of `seconds` attached (the clip lives in the returned folder).
fn with_clip(seconds: f32) -> (tempfile::TempDir, std::path::PathBuf, App) {
    let dir = tempfile::tempdir().expect("dir");
    let clip = dir.path().join("clip.wav");
    tone(&clip, seconds);
    let mut app = ready_app();
    command(&mut app, &format!("/attach {}", clip.display()));
    (dir, clip, app)
}

fn sent(app: &mut App, text: &str) -> Vec<Attachment> {
    type_text(app, text);
    match app.update(key(KeyCode::Enter)).as_slice() {
        [Command::Submit { images, .. }] => images.clone(),
        other => panic!("expected one submit, got {other:?}"),
    }
}

#[test]
fn an_attached_recording_shows_its_length_and_tokens_and_goes_as_audio() {
    let (_dir, clip, mut app) = with_clip(2.5);
    let tokens = gemma_media::audio::audio_tokens(40_000);
    let chip = format!("[audio clip.wav 2.5 s · {tokens} tok]");
    let shown = screen(&mut app);
    assert!(shown.contains(&chip), "{shown}");
    let images = sent(&mut app, "What is this sound?");
    assert_eq!(images, vec![Attachment::audio(clip.clone())]);
    assert_eq!(images[0].kind, MediaKind::Audio);
    // The message keeps its chip.
    assert!(screen(&mut app).contains(&chip));
}

#[test]
fn a_recording_longer_than_30_seconds_says_its_pieces_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let long = dir.path().join("long.wav");
    tone(&long, 65.0);
    let bad = dir.path().join("bad.wav");
    std::fs::write(&bad, b"RIFF....WAVEnot really").expect("write");
    let mut app = ready_app();
    command(
        &mut app,
        &format!("/attach {} {}", long.display(), bad.display()),
    );
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.contains("long.wav 65.0 s"), "{flash}");
    assert!(flash.contains("3 parts"), "{flash}");
    assert!(flash.contains("bad.wav"), "{flash}");
    assert_eq!(app.tab().expect("tab").attachments.len(), 1);
}

/// A microphone that "records" a tone, at 48 kHz stereo.
#[derive(Debug, Default)]
struct Scripted {
    started: Arc<Mutex<u32>>,
}

#[derive(Debug)]
struct Take48k;

impl Microphone for Scripted {
    fn start(&self) -> Result<Box<dyn Recording>, MicError> {
        *self.started.lock().expect("lock") += 1;
        Ok(Box::new(Take48k))
    }
}

impl Recording for Take48k {
    fn level(&self) -> f32 {
        0.25
    }

    fn seconds(&self) -> f32 {
        1.5
    }

    fn finish(self: Box<Self>) -> Result<Take, MicError> {
        let samples = (0..72_000)
            .map(|i| 0.2 * (i as f32 * 300.0 * std::f32::consts::TAU / 48_000.0).sin())
            .collect();
        Ok(Take {
            samples,
            rate: 48_000,
        })
    }
}

#[derive(Debug)]
struct Deaf;

impl Microphone for Deaf {
    fn start(&self) -> Result<Box<dyn Recording>, MicError> {
        Err(MicError::NoDevice("ALSA has no default input".into()))
    }
}

#[test]
fn push_to_talk_records_shows_the_level_and_attaches_the_take() {
    let dir = tempfile::tempdir().expect("dir");
    let mut app = ready_app();
    let mic = Scripted::default();
    let started = mic.started.clone();
    app.mic = Box::new(mic);
    app.recordings_dir = Some(dir.path().join("recordings"));
    app.update(key(KeyCode::F(5)));
    assert_eq!(*started.lock().expect("lock"), 1);
    let shown = screen(&mut app);
    assert!(shown.contains("● rec 1.5 s"), "{shown}");
    assert!(shown.contains("F5 stops"), "{shown}");
    // Ticks redraw while it records.
    app.dirty = false;
    app.update(Msg::Tick(std::time::Instant::now()));
    assert!(app.dirty);
    app.update(key(KeyCode::F(5)));
    assert!(app.recording.is_none());
    let t = app.tab().expect("tab");
    let chip = t.attachments.first().expect("attached");
    let sound = chip.sound.expect("a recording");
    assert!((sound.seconds - 1.5).abs() < 0.01, "{sound:?}");
    assert_eq!(sound.tokens, gemma_media::audio::audio_tokens(24_000));
    // Kept as 16 kHz WAV in the recordings folder.
    assert!(chip.path.starts_with(dir.path().join("recordings")));
    let kept = gemma_media::audio::Clip::open(&chip.path).expect("a WAV file");
    assert_eq!(kept.samples().len(), 24_000);
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.contains("recorded [audio rec-"), "{flash}");
    let images = sent(&mut app, "Transcribe it");
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].kind, MediaKind::Audio);
}

#[test]
fn push_to_talk_without_a_microphone_says_why() {
    let mut app = ready_app();
    app.mic = Box::new(Deaf);
    app.update(key(KeyCode::F(5)));
    assert!(app.recording.is_none());
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.contains("no microphone found"), "{flash}");
    assert!(flash.contains("/attach FILE.wav"), "{flash}");
}

/// A message whose recordings alone pass the context is not sent (the engine would decode and
/// encode it all before refusing it): the app says so and keeps the text and the chip
/// (probe 2026-12-06, F4).
#[test]
fn a_message_that_cannot_fit_the_context_is_not_sent() {
    let (_dir, _clip, mut app) = with_clip(2.5);
    let tokens = gemma_media::audio::audio_tokens(40_000);
    app.tabs[0].choices.context = Some(tokens);
    type_text(&mut app, "What is this sound?");
    assert!(app.update(key(KeyCode::Enter)).is_empty(), "nothing sent");
    let flash = app.flash.clone().unwrap_or_default();
    assert!(flash.contains("more than the context holds"), "{flash}");
    let t = app.tab().expect("tab");
    assert_eq!(t.editor.text(), "What is this sound?");
    assert_eq!(t.attachments.len(), 1);
    assert!(t.messages.is_empty());
    // With room, it goes.
    app.tabs[0].choices.context = Some(tokens + 64);
    assert_eq!(app.update(key(KeyCode::Enter)).len(), 1);
}
