//! Gemma 4's vision towers: a picture's patches in, the soft tokens the decoder takes in place
//! of its image placeholders out (`n × text hidden`, see [`crate::model::soft`]). Stateless and
//! config-driven ([`config::VisionSpec`] from `vision_config`): the ViT of E2B/E4B (clipped
//! linears) and of 26B/31B (`standardize`) in [`vit`], the 12B's encoder-free embedder in
//! [`unified`], each followed by the projector (weightless RMSNorm, then a linear map to the text
//! width). They run on the host kernels (the packed GEMM and the fused attention of the text
//! step), weights in their stored type, in place.

pub mod config;
pub mod mmproj;
mod unified;
pub(crate) mod vit;

use std::path::{Path, PathBuf};

use gemma_kernels::qmatmul::QMatrix;

use crate::model::host_math::norm_rows;

use self::config::{TowerSpec, VisionSpec};
use self::mmproj::{ImageIds, Mmproj};
use crate::checkpoint::LoadedModel;
use crate::deferred::Deferred;
use crate::error::{Error, Result};
use crate::tower_ids::{Lookup, is_gguf, resolve};
use crate::tower_parts::{matrix, norm, products, values};
use crate::weights::TensorSource;

/// A loaded vision tower with its projector.
#[derive(Debug)]
pub struct VisionTower {
    spec: VisionSpec,
    tower: Tower,
    /// `[text hidden, tower width]`.
    projector: QMatrix,
}

#[derive(Debug)]
enum Tower {
    Vit(vit::Vit),
    Unified(unified::Unified),
}

/// A picture's patches as the tower takes them (`gemma_media::Patches`, as plain data).
#[derive(Debug, Clone, Copy)]
pub struct PatchInput<'a> {
    /// `count × side² × 3` values in [0, 1], patch after patch, each (row, column, channel).
    pub values: &'a [f32],
    /// Each patch's (x, y) in patches.
    pub positions: &'a [[u32; 2]],
}

impl VisionTower {
    /// Loads the tower `spec` describes from `src`.
    pub fn load(spec: VisionSpec, src: &dyn TensorSource) -> Result<Self> {
        let (tower, width) = match &spec.tower {
            TowerSpec::Vit(v) => (Tower::Vit(vit::Vit::load(v, &spec, src)?), v.hidden),
            TowerSpec::Unified(u) => (
                Tower::Unified(unified::Unified::load(u, &spec, src)?),
                u.width,
            ),
        };
        let name = [
            "embed_vision.embedding_projection.weight",
            "vision_embedder.multimodal_embedder.embedding_projection.weight",
        ]
        .into_iter()
        .find(|n| src.shape(n).is_some())
        .unwrap_or("embed_vision.embedding_projection.weight");
        let projector = matrix(src, name, &[spec.text_hidden, width])?;
        Ok(Self {
            spec,
            tower,
            projector,
        })
    }

    /// The tower's description.
    pub fn spec(&self) -> &VisionSpec {
        &self.spec
    }

    /// The soft tokens of one picture: `n × text hidden` values, `n` being its patches over
    /// the pooling area (ViT) or its patches (the 12B's embedder).
    pub fn encode(&self, input: PatchInput) -> Result<Vec<f32>> {
        let side = self.spec.input_side();
        let n = input.positions.len();
        if n == 0 || input.values.len() != n * side * side * 3 {
            return Err(Error::Invalid(format!(
                "{} values are not {n} patches of {side}×{side} pixels",
                input.values.len()
            )));
        }
        let out = match &self.tower {
            Tower::Vit(v) => v.forward(input, &self.spec)?,
            Tower::Unified(u) => u.forward(input)?,
        };
        let width = self.projector.cols();
        let mut out = out;
        norm_rows(&norm(None, self.spec.eps), &mut out, width);
        Ok(products(&self.projector, &out, n_rows(&out, width)))
    }
}

/// The vision tower of the Hugging Face checkpoint at `path` (its directory or a file in it),
/// with a clear error when it has none.
pub fn open(path: &Path) -> Result<VisionTower> {
    deferred(path)?.open()
}

/// [`open`] in two steps: the checkpoint's vision spec now, its weights when opened.
fn deferred(path: &Path) -> Result<Deferred<VisionTower, VisionSpec>> {
    if is_gguf(path) {
        return Err(Error::Invalid(format!(
            "{} is a GGUF file, which holds the text tower only: its vision tower is the mmproj \
             GGUF that llama.cpp's converter writes with --mmproj; pass it with --mmproj FILE, \
             set model.mmproj in the config, or put it beside the model as mmproj*.gguf",
            path.display()
        )));
    }
    let dir = crate::weights::model_dir(path);
    let spec = spec_of(&dir)?.ok_or_else(|| {
        Error::Invalid(format!(
            "the checkpoint in {} has no vision tower (its config.json has no vision_config): \
             this model reads text only",
            dir.display()
        ))
    })?;
    let load_spec = spec.clone();
    let load = Box::new(move || {
        let src = crate::weights::safetensors::SafetensorsSource::open(&dir)?;
        VisionTower::load(load_spec, &src)
    });
    Ok(Deferred { spec, load })
}

/// The vision tower for the model `lm`: the mmproj file `mmproj` names, else an
/// `mmproj*.gguf` beside a GGUF model (or in a checkpoint directory without a
/// `vision_config`), else the checkpoint's own. A GGUF decoder takes its image masking from the
/// mmproj, since its text file does not carry it. `hint`: the image ids to take when neither
/// the checkpoint nor its vocabulary names them (see [`infer_ids`]).
pub fn open_for(
    lm: &mut LoadedModel,
    mmproj: Option<&Path>,
    hint: Option<ImageIds>,
) -> Result<VisionTower> {
    deferred_for(lm, mmproj, hint)?.open()
}

/// [`open_for`] in two steps: what the model's prompts need of its tower now (its spec, and a
/// GGUF decoder's image masking), its weights when opened.
pub fn deferred_for(
    lm: &mut LoadedModel,
    mmproj: Option<&Path>,
    hint: Option<ImageIds>,
) -> Result<Deferred<VisionTower, VisionSpec>> {
    let found = match mmproj {
        Some(p) => Some(p.to_path_buf()),
        None => beside(&lm.path)?,
    };
    let Some(file) = found else {
        return deferred(&lm.path);
    };
    let m = Mmproj::open(&file, lm.model.config().hidden_size, image_ids(lm, hint)?)?;
    if is_gguf(&lm.path) {
        lm.model.set_image_blocks(m.image_blocks());
    }
    let spec = m.spec().clone();
    let load = Box::new(move || VisionTower::load(m.spec().clone(), &m));
    Ok(Deferred { spec, load })
}

/// The one `mmproj*.gguf` in the model's directory, when the model does not carry its own tower.
fn beside(model: &Path) -> Result<Option<PathBuf>> {
    let dir = crate::weights::model_dir(model);
    if !is_gguf(model) && spec_of(&dir)?.is_some() {
        return Ok(None);
    }
    mmproj_beside(&dir)
}

/// The one `mmproj*.gguf` in `dir`, `None` when there is none, an error naming them when there
/// are several (shared with the audio tower: one mmproj holds both for E2B/E4B).
pub(crate) fn mmproj_beside(dir: &Path) -> Result<Option<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let lower = name.to_ascii_lowercase();
            lower.starts_with("mmproj") && lower.ends_with(".gguf") && p.is_file()
        })
        .collect();
    found.sort();
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(Error::Invalid(format!(
            "{} mmproj files lie beside the model ({}): choose one with --mmproj FILE or \
             model.mmproj",
            found.len(),
            found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The image ids of `lm`'s prompts: its checkpoint's `config.json`, else its tokenizer's
/// `<|image|>`, `<|image>` and `<image|>`, else Gemma 4's; each checked against the vocabulary.
fn image_ids(lm: &LoadedModel, hint: Option<ImageIds>) -> Result<ImageIds> {
    let dir = crate::weights::model_dir(&lm.path);
    // Beside a GGUF, a config.json with a vision_config is the checkpoint it came from.
    let from_config = spec_of(&dir)
        .ok()
        .flatten()
        .map(|s| [s.image_token_id, s.boi_token_id, s.eoi_token_id]);
    let lookup = Lookup {
        from_config,
        names: ["<|image|>", "<|image>", "<image|>"],
        hint: hint.map(|h| [h.image, h.boi, h.eoi]),
        default: [258_880, 255_999, 258_882],
    };
    let [image, boi, eoi] = resolve(lm, lookup).ok_or_else(|| {
        Error::Invalid(format!(
            "the model's vocabulary ({} ids) has no image tokens (<|image|>, <|image>, \
             <image|>): it is not an image-and-text model",
            lm.model.config().vocab_size
        ))
    })?;
    Ok(ImageIds { image, boi, eoi })
}

/// The image ids a prompt's own layout shows, for a model whose vocabulary does not name them:
/// the id of its longest run (two or more of one id), with the ids just before and after it,
/// when every run of that id sits between the same two.
pub fn infer_ids(ids: &[u32]) -> Option<ImageIds> {
    let runs = |id: u32| {
        let mut out = Vec::new();
        let mut i = 0;
        while i < ids.len() {
            let start = i;
            while i < ids.len() && ids[i] == ids[start] {
                i += 1;
            }
            if ids[start] == id && i - start >= 2 {
                out.push((start, i));
            }
        }
        out
    };
    let (mut best, mut len) = (None, 1);
    let mut i = 0;
    while i < ids.len() {
        let start = i;
        while i < ids.len() && ids[i] == ids[start] {
            i += 1;
        }
        if i - start > len {
            (best, len) = (Some(ids[start]), i - start);
        }
    }
    let image = best?;
    let found = runs(image);
    let around = |&(s, e): &(usize, usize)| Some((*ids.get(s.checked_sub(1)?)?, *ids.get(e)?));
    let (boi, eoi) = around(found.first()?)?;
    found
        .iter()
        .all(|r| around(r) == Some((boi, eoi)))
        .then_some(ImageIds { image, boi, eoi })
}

/// The vision side of the checkpoint in `dir` (its `config.json`), `None` when it has none.
pub fn spec_of(dir: &Path) -> Result<Option<VisionSpec>> {
    let path = dir.join("config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::config(&path, format!("not valid JSON: {e}")))?;
    VisionSpec::from_json(&value).map_err(|msg| Error::config(&path, msg))
}

/// The least image budget Gemma 4 takes, in soft tokens.
const LEAST_BUDGET: usize = 70;

/// Refuses a patch beyond the tower's position table (`limit` rows an axis); a picture of
/// `per_token` patches a soft token that is already at the least budget is told to be cropped.
fn check_positions(positions: &[[u32; 2]], limit: usize, per_token: usize) -> Result<()> {
    let Some(&[x, y]) = positions
        .iter()
        .find(|p| p[0] as usize >= limit || p[1] as usize >= limit)
    else {
        return Ok(());
    };
    let fix = if positions.len() > LEAST_BUDGET * per_token {
        "use a smaller image budget, or crop it"
    } else {
        "crop it to a less elongated shape (it is at the least image budget already)"
    };
    Err(Error::Invalid(format!(
        "the picture is too long and thin for this tower: a patch at ({x}, {y}) is beyond its \
         {limit} positions a side; {fix}"
    )))
}

fn n_rows(x: &[f32], width: usize) -> usize {
    x.len() / width.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A picture beyond the position table is told what helps: a smaller budget while there is
    /// one, cropping at the least (probe 2026-12-06, F12).
    #[test]
    fn a_picture_beyond_the_positions_is_told_what_helps() {
        let row = |n: u32| (0..n).map(|x| [x, 0]).collect::<Vec<_>>();
        assert!(check_positions(&row(64), 64, 9).is_ok());
        let at_least = check_positions(&row(630), 64, 9)
            .expect_err("beyond")
            .to_string();
        assert!(
            at_least.contains("crop it") && !at_least.contains("smaller image budget"),
            "{at_least}"
        );
        let more = check_positions(&row(1000), 64, 9)
            .expect_err("beyond")
            .to_string();
        assert!(more.contains("smaller image budget"), "{more}");
    }

    #[test]
    fn image_ids_are_read_off_a_prompts_layout() {
        let ids = [2, 7, 500, 501, 501, 501, 502, 9, 500, 501, 501, 502, 3];
        let want = ImageIds {
            image: 501,
            boi: 500,
            eoi: 502,
        };
        assert_eq!(infer_ids(&ids), Some(want));
        // Runs of one id between different neighbours say nothing.
        assert_eq!(infer_ids(&[2, 500, 501, 501, 502, 8, 501, 501, 9]), None);
        assert_eq!(infer_ids(&[2, 3, 4]), None);
    }
}
