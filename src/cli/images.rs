//! `--image FILE` and `--audio FILE` on the command line: for a chat turn, the attachments sent
//! with it; for `generate --ids`, each picture encoded by the checkpoint's tower at the
//! `--image-tokens` budget ([`pictures::encode`]) and each recording's 30-second pieces by its
//! audio tower ([`sounds::encode`]), placed on the runs of image and audio placeholders of the
//! prompt's ids.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use gemma_engine::images::MediaSpan;
use gemma_engine::pictures::{self, Encoded};
use gemma_engine::protocol::{Attachment, MediaKind};
use gemma_engine::sounds;
use gemma_model::audio::AudioTower;
use gemma_model::vision::VisionTower;

use super::Refused;

/// Pictures and recordings for the prompt.
#[derive(Debug, Args, Default)]
pub struct ImageArgs {
    /// A picture (PNG, JPEG, WebP, GIF) for the prompt; repeat for several, in order.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// A recording (WAV, FLAC, MP3, OGG) for the prompt, after the pictures (Gemma 4 E2B and
    /// E4B); repeat for several, in order. Each 30 seconds is its own audio span.
    #[arg(long = "audio", value_name = "FILE")]
    pub audio: Vec<PathBuf>,
    /// Soft tokens per picture at most: 70, 140, 280, 560 or 1120.
    #[arg(long, default_value_t = 280)]
    pub image_tokens: usize,
}

impl ImageArgs {
    /// The pictures and then the recordings for a chat turn, the budget checked first.
    pub fn attachments(&self) -> anyhow::Result<Vec<Attachment>> {
        check_budget(self.image_tokens)?;
        let pictures = self
            .images
            .iter()
            .map(|path| Attachment::image(path.clone(), self.image_tokens));
        let recordings = self
            .audio
            .iter()
            .map(|path| Attachment::audio(path.clone()));
        Ok(pictures.chain(recordings).collect())
    }
}

/// Refuses (exit 2) a budget Gemma 4 does not take.
pub fn check_budget(tokens: usize) -> anyhow::Result<()> {
    if gemma_media::BUDGETS.contains(&tokens) {
        return Ok(());
    }
    Err(Refused(format!(
        "--image-tokens {tokens} is not a budget Gemma 4 takes: use 70, 140, 280, 560 or 1120"
    ))
    .into())
}

/// Reads, cuts and encodes each picture with `tower`.
pub fn encode(tower: &VisionTower, args: &ImageArgs) -> anyhow::Result<Vec<Encoded>> {
    check_budget(args.image_tokens)?;
    args.images
        .iter()
        .map(|path| {
            pictures::encode(tower, path, args.image_tokens)
                .with_context(|| format!("encoding {}", path.display()))
        })
        .collect()
}

/// Decodes and encodes each recording's pieces with `tower`.
pub fn encode_audio(tower: &AudioTower, args: &ImageArgs) -> anyhow::Result<Vec<Encoded>> {
    let mut out = Vec::new();
    for path in &args.audio {
        let pieces = sounds::encode(tower, path, &|| false)
            .with_context(|| format!("encoding {}", path.display()))?;
        out.extend(pieces);
    }
    Ok(out)
}

/// A kind of placeholder run: its begin, placeholder and end ids, and its name in messages.
pub struct Run {
    /// Begin, placeholder, end.
    pub ids: [u32; 3],
    /// What kind.
    pub kind: MediaKind,
}

impl Run {
    fn names(&self) -> (&'static str, &'static str) {
        match self.kind {
            MediaKind::Image => ("image", "picture"),
            MediaKind::Audio => ("audio", "recording piece"),
        }
    }
}

/// Places each encoded picture (or recording piece), in order, on the next run of `run`'s
/// placeholders (between its begin and end ids) in `ids`; refused when the runs and the
/// attachments do not match, naming both counts.
pub fn place(ids: &[u32], run: &Run, encoded: Vec<Encoded>) -> anyhow::Result<Vec<MediaSpan>> {
    let [begin, placeholder, end] = run.ids;
    let (tag, what) = run.names();
    let runs = placeholder_runs(ids, run.ids);
    if let Some(&(at, _, _)) = runs.iter().find(|r| !r.2) {
        return Err(Refused(format!(
            "the {tag} placeholders at position {at} are not between a begin-{tag} id ({begin}) \
             and an end-{tag} id ({end})"
        ))
        .into());
    }
    if runs.len() != encoded.len() {
        return Err(Refused(format!(
            "the ids hold {} run(s) of {tag} placeholders (id {placeholder}) but {} {what}(s) \
             were given",
            runs.len(),
            encoded.len()
        ))
        .into());
    }
    runs.into_iter()
        .zip(encoded)
        .map(|((at, len, _), e)| {
            if len != e.tokens {
                return Err(Refused(format!(
                    "{}: the run of {tag} placeholders at position {at} is {len} long, but the \
                     {what} makes {} soft tokens",
                    e.path.display(),
                    e.tokens
                ))
                .into());
            }
            Ok(MediaSpan {
                source: None,
                at,
                rows: e.rows,
                tokens: e.tokens,
                key: e.key,
                budget: e.budget,
                kind: run.kind,
            })
        })
        .collect()
}

/// (start, length, whether a begin id comes before it and an end id after) of each maximal run
/// of placeholders.
fn placeholder_runs(ids: &[u32], [begin, placeholder, end]: [u32; 3]) -> Vec<(usize, usize, bool)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        if ids[i] != placeholder {
            i += 1;
            continue;
        }
        let start = i;
        while i < ids.len() && ids[i] == placeholder {
            i += 1;
        }
        let opened = start > 0 && ids[start - 1] == begin;
        let closed = ids.get(i) == Some(&end);
        runs.push((start, i - start, opened && closed));
    }
    runs
}
