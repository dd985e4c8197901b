//! Pictures attached to the next message: `/attach PATH` (or a picture's path pasted on its own),
//! `/detach [N]`, and `/image-tokens N` for the tab's budget. Each shows as a chip
//! (`[img photo.jpg 1024×768 · 280 tok]`) in the input until it is sent, and in the transcript on
//! the message after; the engine reads and encodes the file when the message goes.

use std::path::{Path, PathBuf};

use super::App;

/// Gemma 4's default budget: soft tokens per picture at most.
pub const DEFAULT_TOKENS: usize = 280;

/// A picture attached to a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chip {
    /// Its file.
    pub path: PathBuf,
    /// Soft tokens at most (the tab's budget when it was attached).
    pub tokens: usize,
    /// Its width and height in pixels, as the file's header says.
    pub size: (u32, u32),
}

impl Chip {
    /// The picture at `path`, checked to be one gemma-chat reads (its header only: the pixels
    /// are decoded when the message is sent).
    pub fn probe(path: &Path, tokens: usize) -> Result<Self, String> {
        let size = gemma_media::Picture::probe(path).map_err(|e| e.to_string())?;
        Ok(Self {
            path: path.to_path_buf(),
            tokens,
            size,
        })
    }

    /// Soft tokens the picture makes at its budget (Gemma 4's resize: sides a multiple of 48).
    pub fn soft_tokens(&self) -> usize {
        let (w, h) = self.size;
        gemma_media::patches::fit(h, w, self.tokens)
            .map_or(0, |(h, w)| (h as usize / 48) * (w as usize / 48))
    }

    /// `[img photo.jpg 1024×768 · 280 tok]`.
    pub fn label(&self) -> String {
        let name = self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        let name = gemma_protocol::text::printable(&name).into_owned();
        format!(
            "[img {name} {}×{} · {} tok]",
            self.size.0,
            self.size.1,
            self.soft_tokens()
        )
    }
}

impl App {
    /// `/attach PATH`: the picture goes with the next message.
    pub(super) fn attach(&mut self, arg: &str) {
        let arg = arg.trim().trim_matches(|c| c == '\'' || c == '"');
        if arg.is_empty() {
            self.flash = Some("/attach PATH adds a picture to the next message".into());
            return;
        }
        let Some(t) = self.tab_mut() else { return };
        match Chip::probe(&expand_home(arg), t.image_tokens) {
            Ok(chip) => {
                let label = chip.label();
                t.attachments.push(chip);
                self.flash = Some(format!("attached {label}: /detach removes it"));
            }
            Err(why) => self.flash = Some(format!("cannot attach: {why}")),
        }
    }

    /// `/detach [N]`: removes the Nth chip (1 is the first), or all of them.
    pub(super) fn detach(&mut self, arg: &str) {
        let Some(t) = self.tab_mut() else { return };
        let gone = match arg.trim().parse::<usize>() {
            Ok(n) if (1..=t.attachments.len()).contains(&n) => {
                vec![t.attachments.remove(n - 1)]
            }
            Ok(n) => {
                self.flash = Some(format!("there is no picture {n} attached"));
                return;
            }
            Err(_) => std::mem::take(&mut t.attachments),
        };
        self.flash = Some(match gone.len() {
            0 => "no picture is attached".into(),
            1 => format!("removed {}", gone[0].label()),
            n => format!("removed {n} pictures"),
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

    /// A paste that is one picture's path (as a terminal pastes a dropped file) attaches it;
    /// anything else is text.
    pub(super) fn pasted_picture(&mut self, text: &str) -> bool {
        let line = text.trim().trim_matches(|c| c == '\'' || c == '"');
        if line.is_empty() || line.contains('\n') || !looks_like_picture(line) {
            return false;
        }
        let path = expand_home(line);
        if !path.is_file() {
            return false;
        }
        self.attach(line);
        true
    }
}

fn looks_like_picture(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".webp", ".gif"]
        .iter()
        .any(|e| lower.ends_with(e))
}

/// `~/x` as the home directory's `x`; a `file://` URL as its path.
fn expand_home(s: &str) -> PathBuf {
    let s = s.strip_prefix("file://").unwrap_or(s);
    match (s.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(s),
    }
}
