//! A picture or a recording attached to a message ([`Chip`]): its file (kept absolute), the
//! budget or length it will take, its soft tokens as the towers will make them, and its label.
//! A leaf: the tab and the attachment commands both use it.

use std::path::{Path, PathBuf};

/// Gemma 4's default budget: soft tokens per picture at most.
pub const DEFAULT_TOKENS: usize = 280;

/// A picture or a recording attached to a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Chip {
    /// Its file.
    pub path: PathBuf,
    /// A picture's soft tokens at most (the tab's budget when it was attached).
    pub tokens: usize,
    /// A picture's width and height in pixels, as the file's header says.
    pub size: (u32, u32),
    /// What a recording holds; `None` for a picture.
    pub sound: Option<Sound>,
}

/// A recording's length and the soft tokens the audio tower makes of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sound {
    /// Its length in seconds.
    pub seconds: f32,
    /// Soft tokens, every 30-second piece's together.
    pub tokens: usize,
    /// 30-second pieces: each is its own audio span.
    pub pieces: usize,
}

/// `path` made absolute (against the directory gemma-chat runs in), as the chat keeps it: a
/// saved or exported chat names the file wherever it is read from.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl Chip {
    /// The picture at `path`, checked to be one gemma-chat reads (its header only: the pixels
    /// are decoded when the message is sent).
    pub fn probe(path: &Path, tokens: usize) -> Result<Self, String> {
        let size = gemma_media::Picture::probe(path).map_err(|e| e.to_string())?;
        Ok(Self {
            path: absolute(path),
            tokens,
            size,
            sound: None,
        })
    }

    /// The recording at `path`, decoded (not resampled) to count its length and soft tokens;
    /// the engine reads it again when the message is sent.
    pub fn probe_audio(path: &Path) -> Result<Self, String> {
        let p = gemma_media::audio::Probe::open(path).map_err(|e| e.to_string())?;
        Ok(Self {
            path: absolute(path),
            tokens: 0,
            size: (0, 0),
            sound: Some(Sound {
                seconds: p.seconds(),
                tokens: p.tokens(),
                pieces: p.pieces(),
            }),
        })
    }

    /// Soft tokens the picture makes at its budget (Gemma 4's resize: sides a multiple of 48),
    /// or the recording makes.
    pub fn soft_tokens(&self) -> usize {
        if let Some(s) = &self.sound {
            return s.tokens;
        }
        let (w, h) = self.size;
        gemma_media::patches::fit(h, w, self.tokens)
            .map_or(0, |(h, w)| (h as usize / 48) * (w as usize / 48))
    }

    /// `[img photo.jpg 1024×768 · 280 tok]`, `[audio clip.wav 12.4 s · 310 tok]` (with
    /// `· 3 parts` past 30 seconds).
    pub fn label(&self) -> String {
        let name = self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        let name = gemma_protocol::text::printable(&name).into_owned();
        if let Some(s) = &self.sound {
            let parts = if s.pieces > 1 {
                format!(" · {} parts", s.pieces)
            } else {
                String::new()
            };
            return format!(
                "[audio {name} {:.1} s · {} tok{parts}]",
                s.seconds, s.tokens
            );
        }
        format!(
            "[img {name} {}×{} · {} tok]",
            self.size.0,
            self.size.1,
            self.soft_tokens()
        )
    }

    /// What the engine is sent for it.
    pub fn attachment(&self) -> gemma_protocol::Attachment {
        if self.sound.is_some() {
            gemma_protocol::Attachment::audio(self.path.clone())
        } else {
            gemma_protocol::Attachment::image(self.path.clone(), self.tokens)
        }
    }
}

/// A decoded recording's length, soft tokens and pieces.
pub fn sound_of(clip: &gemma_media::audio::Clip) -> Sound {
    let (mut tokens, mut pieces) = (0, 0);
    for p in clip.pieces() {
        tokens += gemma_media::audio::audio_tokens(p.len());
        pieces += 1;
    }
    Sound {
        seconds: clip.seconds(),
        tokens,
        pieces,
    }
}
