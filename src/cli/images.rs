//! `--image FILE` on the command line: for a chat turn, the attachments sent with it; for
//! `generate --ids`, each picture encoded by the checkpoint's tower at the `--image-tokens`
//! budget ([`pictures::encode`]) and placed on a run of image placeholders of the prompt's ids.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use gemma_engine::images::Image;
use gemma_engine::pictures::{self, Encoded};
use gemma_engine::protocol::Attachment;
use gemma_model::vision::VisionTower;
use gemma_model::vision::config::VisionSpec;

use super::Refused;

/// Pictures for the prompt.
#[derive(Debug, Args, Default)]
pub struct ImageArgs {
    /// A picture (PNG, JPEG, WebP, GIF) for the prompt; repeat for several, in order.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// Soft tokens per picture at most: 70, 140, 280, 560 or 1120.
    #[arg(long, default_value_t = 280)]
    pub image_tokens: usize,
}

impl ImageArgs {
    /// The pictures for a chat turn, the budget checked first.
    pub fn attachments(&self) -> anyhow::Result<Vec<Attachment>> {
        check_budget(self.image_tokens)?;
        Ok(self
            .images
            .iter()
            .map(|path| Attachment {
                path: path.clone(),
                tokens: self.image_tokens,
            })
            .collect())
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

/// Places each picture, in order, on the next run of image placeholders (between a
/// begin-image and an end-image id) of `ids`; refused when the runs and the pictures do not
/// match, naming both counts.
pub fn place(ids: &[u32], spec: &VisionSpec, encoded: Vec<Encoded>) -> anyhow::Result<Vec<Image>> {
    let runs = placeholder_runs(ids, spec);
    if let Some(&(at, _, _)) = runs.iter().find(|r| !r.2) {
        return Err(Refused(format!(
            "the image placeholders at position {at} are not between a begin-image id ({}) and \
             an end-image id ({})",
            spec.boi_token_id, spec.eoi_token_id
        ))
        .into());
    }
    if runs.len() != encoded.len() {
        return Err(Refused(format!(
            "the ids hold {} run(s) of image placeholders (id {}) but {} picture(s) were given",
            runs.len(),
            spec.image_token_id,
            encoded.len()
        ))
        .into());
    }
    runs.into_iter()
        .zip(encoded)
        .map(|((at, len, _), e)| {
            if len != e.tokens {
                return Err(Refused(format!(
                    "{}: the run of image placeholders at position {at} is {len} long, but the \
                     picture makes {} soft tokens at this budget",
                    e.path.display(),
                    e.tokens
                ))
                .into());
            }
            Ok(Image {
                at,
                rows: e.rows,
                key: e.key,
                budget: e.budget,
            })
        })
        .collect()
}

/// (start, length, whether a begin-image id comes before it and an end-image id after) of each
/// maximal run of image placeholders.
fn placeholder_runs(ids: &[u32], spec: &VisionSpec) -> Vec<(usize, usize, bool)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        if ids[i] != spec.image_token_id {
            i += 1;
            continue;
        }
        let start = i;
        while i < ids.len() && ids[i] == spec.image_token_id {
            i += 1;
        }
        let opened = start > 0 && ids[start - 1] == spec.boi_token_id;
        let closed = ids.get(i) == Some(&spec.eoi_token_id);
        runs.push((start, i - start, opened && closed));
    }
    runs
}
