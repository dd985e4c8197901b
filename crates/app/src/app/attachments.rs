//! What goes with the next message: pictures, recordings and text files. `/attach PATH…` (paths,
//! quoted paths, globs; a picture's or recording's path pasted on its own too), `/detach [N]`,
//! and `/image-tokens N` for the tab's budget. Each shows as a chip in the input until it is
//! sent, and in the transcript on the message after: `[img photo.jpg 1024×768 · 280 tok]`,
//! `[audio clip.wav 12.4 s · 310 tok]` (the engine reads and encodes the file when the message
//! goes) or `[file main.rs · 3.4 kB · ~870 tok]` (read now, sent as a block before the text:
//! [`crate::attach`]).

use std::path::Path;

use super::App;
pub use super::chip::{Chip, DEFAULT_TOKENS, Sound, sound_of};
use super::tab::Tab;
use crate::attach::{self, expand_home, looks_like_audio, looks_like_picture};

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
