//! What goes with the next message: pictures, recordings and text files. `/attach PATH…` (paths,
//! quoted paths, globs; a picture's or recording's path pasted on its own too), `/detach [N]`,
//! and `/image-tokens N` for the tab's budget. Each shows as a chip in the input until it is
//! sent, and in the transcript on the message after: `[img photo.jpg 1024×768 · 280 tok]`,
//! `[audio clip.wav 12.4 s · 310 tok]` (the engine reads and encodes the file when the message
//! goes) or `[file main.rs · 3.4 kB · ~870 tok]` (read now, sent as a block before the text:
//! [`crate::attach`]).

use std::path::{Path, PathBuf};

use super::App;
use super::tab::Tab;
use crate::attach::{self, TextFile, expand_home, looks_like_audio, looks_like_picture};
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

impl App {
    /// `/attach PATH…`: each picture and text file goes with the next message; what cannot be
    /// attached is named with the reason, and the rest is attached all the same.
    pub(super) fn attach(&mut self, arg: &str) {
        let args = attach::split_args(arg);
        if args.is_empty() {
            self.flash = Some(
                "/attach PATH… adds pictures and text files (globs too) to the next message".into(),
            );
            return;
        }
        let max_kb = self
            .config
            .as_ref()
            .map_or(attach::DEFAULT_MAX_KB, |c| c.ui.attach_max_kb);
        let Some(t) = self.tab_mut() else { return };
        let mut added = Vec::new();
        let mut refused = Vec::new();
        for path in args.iter().flat_map(|a| match attach::expand(a) {
            Ok(paths) => paths.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e.to_string())],
        }) {
            match path.and_then(|p| add(t, &p, max_kb)) {
                Ok(label) => added.push(label),
                Err(why) => refused.push(why),
            }
        }
        self.flash = Some(attached_note(&added, &refused));
    }

    /// `/detach [N]`: removes the Nth chip (1 is the first; pictures come before files), or all
    /// of them.
    pub(super) fn detach(&mut self, arg: &str) {
        let Some(t) = self.tab_mut() else { return };
        let pictures = t.attachments.len();
        let gone: Vec<String> = match arg.trim().parse::<usize>() {
            Ok(n) if (1..=pictures).contains(&n) => vec![t.attachments.remove(n - 1).label()],
            Ok(n) if n > pictures && n <= pictures + t.files.len() => {
                vec![t.files.remove(n - pictures - 1).label()]
            }
            Ok(n) => {
                self.flash = Some(format!("there is no attachment {n}"));
                return;
            }
            Err(_) => {
                let mut all: Vec<String> = t.attachments.drain(..).map(|c| c.label()).collect();
                all.extend(t.files.drain(..).map(|f| f.label()));
                all
            }
        };
        self.flash = Some(match gone.as_slice() {
            [] => "nothing is attached".into(),
            [one] => format!("removed {one}"),
            all => format!("removed {} attachments", all.len()),
        });
    }

    /// `/image-tokens N`: the tab's budget for pictures attached from now on.
    pub(super) fn set_image_tokens(&mut self, arg: &str) {
        let Some(t) = self.tab_mut() else { return };
        match arg.trim().parse::<usize>() {
            Ok(n) if gemma_media::BUDGETS.contains(&n) => {
                t.image_tokens = n;
                for c in &mut t.attachments {
                    c.tokens = n;
                }
                self.flash = Some(format!("pictures take up to {n} tokens in this tab"));
            }
            _ => {
                self.flash = Some(format!(
                    "image tokens are 70, 140, 280, 560 or 1120 (this tab: {})",
                    t.image_tokens
                ));
            }
        }
    }

    /// A paste that is one picture's or recording's path (as a terminal pastes a dropped file)
    /// attaches it; anything else is text (a path that names no regular file says so).
    pub(super) fn pasted_picture(&mut self, text: &str) -> bool {
        let line = text.trim().trim_matches(|c| c == '\'' || c == '"');
        let media = looks_like_picture(line) || looks_like_audio(line);
        if line.is_empty() || line.contains('\n') || !media {
            return false;
        }
        let path = expand_home(line);
        if !path.is_file() {
            // A pipe or a device is not read (it could block): the paste stays text, and says so.
            if path.exists() {
                let name = gemma_protocol::text::one_line(line).into_owned();
                self.flash = Some(format!(
                    "{name} is not a regular file (a pipe or a device): pasted as text, not \
                     attached"
                ));
            }
            return false;
        }
        self.attach(line);
        true
    }
}

/// Attaches the file at `path` to `t`: a picture or a recording by its extension, anything else
/// as text.
/// Returns its chip's label, or why it was refused.
fn add(t: &mut Tab, path: &Path, max_kb: u64) -> Result<String, String> {
    let name = path.to_string_lossy();
    if looks_like_picture(&name) || looks_like_audio(&name) {
        let chip = if looks_like_audio(&name) {
            Chip::probe_audio(path)
        } else {
            Chip::probe(path, t.image_tokens)
        };
        let chip = chip.map_err(|why| {
            let name = gemma_protocol::text::one_line(&path.to_string_lossy()).into_owned();
            format!("cannot attach {name}: {why}")
        })?;
        let label = chip.label();
        t.attachments.push(chip);
        return Ok(label);
    }
    let file = attach::read_text(path, max_kb).map_err(|e| e.to_string())?;
    let label = file.label();
    t.files.push(file);
    Ok(label)
}

/// What `/attach` says: what was attached, then what was not and why.
fn attached_note(added: &[String], refused: &[String]) -> String {
    let mut parts = Vec::new();
    match added {
        [] => {}
        [one] => parts.push(format!("attached {one}: /detach removes it")),
        all => parts.push(format!(
            "attached {} files: /detach removes them",
            all.len()
        )),
    }
    parts.extend(refused.iter().cloned());
    parts.join("; ")
}

impl Tab {
    /// Tokens the attachments waiting to be sent will take: pictures' soft tokens and files'
    /// estimates ([`attach::estimate_tokens`]).
    pub fn pending_tokens(&self) -> usize {
        let pictures: usize = self.attachments.iter().map(Chip::soft_tokens).sum();
        pictures + self.files.iter().map(TextFile::tokens).sum::<usize>()
    }

    /// The chips of what waits to be sent: pictures, then files.
    pub fn chip_labels(&self) -> Vec<String> {
        let pictures = self.attachments.iter().map(Chip::label);
        pictures
            .chain(self.files.iter().map(TextFile::label))
            .collect()
    }
}
