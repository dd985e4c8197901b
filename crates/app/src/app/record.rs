//! Push-to-talk: a key starts a recording from the microphone ([`crate::mic`]) and stops it;
//! while it runs the status line shows its length and level ([`App::recording_text`]); when it
//! stops, the sound is kept as a 16 kHz WAV file in the data directory's `recordings/` and
//! attached to the next message like a recording given to `/attach`. A recording reaching
//! [`crate::mic::MAX_SECONDS`] stops itself.

use std::path::PathBuf;

use super::App;
use super::attachments::{Chip, sound_of};
use crate::mic::{MAX_SECONDS, Take};

impl App {
    /// The record key: starts a recording, or stops the one running and attaches it.
    pub(super) fn toggle_recording(&mut self) {
        if self.recording.is_some() {
            self.stop_recording();
            return;
        }
        match self.mic.start() {
            Ok(r) => {
                self.recording = Some(r);
                self.flash = None;
            }
            Err(e) => self.flash = Some(e.to_string()),
        }
    }

    /// Stops the recording and attaches it to the shown tab's next message.
    pub(super) fn stop_recording(&mut self) {
        let Some(r) = self.recording.take() else {
            return;
        };
        self.flash = Some(
            match r.finish().map_err(|e| e.to_string()).and_then(|t| {
                let dir = self.recordings_dir.clone();
                keep(&t, dir)
            }) {
                Ok(chip) => {
                    let label = chip.label();
                    if let Some(t) = self.tab_mut() {
                        t.attachments.push(chip);
                    }
                    format!("recorded {label}: Enter sends it, /detach removes it")
                }
                Err(why) => format!("the recording is lost: {why}"),
            },
        );
    }

    /// Called on each tick: a recording at its limit stops.
    pub(super) fn recording_tick(&mut self) {
        if self
            .recording
            .as_ref()
            .is_some_and(|r| r.seconds() >= MAX_SECONDS)
        {
            self.stop_recording();
        }
    }

    /// `● rec 3.2 s ▂▄▆█ · F5 stops` while a recording runs.
    pub fn recording_text(&self) -> Option<String> {
        let r = self.recording.as_ref()?;
        let bars = (r.level().clamp(0.0, 1.0).sqrt() * 8.0).round() as usize;
        let meter: String = "▁▂▃▄▅▆▇█".chars().take(bars.max(1)).collect();
        let key = self
            .keymap
            .key_for(crate::config::action::Action::Record)
            .unwrap_or_else(|| "the record key".into());
        Some(format!("● rec {:.1} s {meter} · {key} stops", r.seconds()))
    }
}

/// The take resampled to 16 kHz mono, written to `dir` as a WAV file, and its chip.
fn keep(take: &Take, dir: Option<PathBuf>) -> Result<Chip, String> {
    let clip = gemma_media::audio::Clip::from_samples(&take.samples, take.rate, 1)
        .map_err(|e| e.to_string())?;
    let dir = dir.ok_or("there is no data directory to keep it in")?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = dir.join(format!("rec-{stamp}.wav"));
    gemma_files::write_atomic(&path, &clip.to_wav())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Chip {
        path,
        tokens: 0,
        size: (0, 0),
        sound: Some(sound_of(&clip)),
    })
}
