//! Gemma 4 E2B/E4B's audio tower: one clip's log-mel features and frame mask in, the soft tokens
//! the decoder takes in place of its `<|audio|>` placeholders out (`n × text hidden`, see
//! [`crate::model::soft`]). Stateless and config-driven ([`config::AudioSpec`] from
//! `audio_config`): the subsampling convolutions (`subsample`), the USM conformer layers
//! (`conformer`, `attention`), the output projection, then `embed_audio` (weightless RMSNorm,
//! linear map to the text width), the padding frames stripped. Weights come from a Hugging Face
//! checkpoint or llama.cpp's mmproj GGUF ([`mmproj`]), in their stored type, used in place, on
//! the host kernels. It does not decode audio or make features (`gemma_media::audio` does).

mod attention;
pub mod config;
mod conformer;
pub mod mmproj;
mod subsample;

use std::path::Path;

use gemma_kernels::qmatmul::QMatrix;

use self::config::AudioSpec;
use self::conformer::Layer;
use self::mmproj::{AudioIds, AudioMmproj};
use self::subsample::Subsample;
use crate::checkpoint::LoadedModel;
use crate::deferred::Deferred;
use crate::error::{Error, Result};
use crate::model::host_math::norm_rows;
use crate::tower_ids::{Lookup, is_gguf, resolve};
use crate::tower_parts::{from_blocks, matrix, norm, products, values};
use crate::weights::TensorSource;

/// A loaded audio tower with its embedder.
#[derive(Debug)]
pub struct AudioTower {
    spec: AudioSpec,
    subsample: Subsample,
    layers: Vec<Layer>,
    /// `[output dims, hidden]`, and its bias.
    output_proj: QMatrix,
    output_bias: Vec<f32>,
    /// `embed_audio`: `[text hidden, output dims]`.
    projector: QMatrix,
}

impl AudioTower {
    /// Loads the tower `spec` describes from `src`.
    pub fn load(spec: AudioSpec, src: &dyn TensorSource) -> Result<Self> {
        spec.check().map_err(Error::Invalid)?;
        let subsample = Subsample::load(&spec, src)?;
        let layers = (0..spec.layers)
            .map(|i| Layer::load(src, &spec, i))
            .collect::<Result<_>>()?;
        let (h, o) = (spec.hidden, spec.output_dims);
        let output_proj = matrix(src, "audio_tower.output_proj.weight", &[o, h])?;
        let output_bias = values(src, "audio_tower.output_proj.bias", &[o])?;
        let projector = matrix(
            src,
            "embed_audio.embedding_projection.weight",
            &[spec.text_hidden, o],
        )?;
        Ok(Self {
            spec,
            subsample,
            layers,
            output_proj,
            output_bias,
            projector,
        })
    }

    /// The tower's description.
    pub fn spec(&self) -> &AudioSpec {
        &self.spec
    }

    /// One ≤ 30 s piece's log-mel features (`frames × mel bins`, row-major, as transformers'
    /// `Gemma4AudioFeatureExtractor` makes them) and its frame mask (`true`: audio) → its soft
    /// tokens, `n × text hidden`: `n` the output frames whose first input frame is audio (the
    /// mask taken every 4th frame), which is the processor's placeholder count for the piece.
    pub fn encode(&self, features: &[f32], mask: &[bool]) -> Result<Vec<f32>> {
        let s = &self.spec;
        let bins = s.mel_bins;
        if mask.is_empty() || !features.len().is_multiple_of(bins) {
            return Err(Error::Invalid(format!(
                "{} feature values are not frames of {bins} mel bins",
                features.len()
            )));
        }
        if features.len() / bins != mask.len() {
            return Err(Error::Invalid(format!(
                "a mask of {} frames for {} frames of features",
                mask.len(),
                features.len() / bins
            )));
        }
        let (mut x, out_mask) = self.subsample.forward(features, mask, bins);
        for layer in &self.layers {
            layer.forward(&mut x, &out_mask, s);
        }
        let kept: Vec<f32> = x
            .chunks_exact(s.hidden)
            .zip(&out_mask)
            .filter(|(_, valid)| **valid)
            .flat_map(|(row, _)| row.iter().copied())
            .collect();
        let n = kept.len() / s.hidden;
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut y = products(&self.output_proj, &kept, n);
        for row in y.chunks_exact_mut(s.output_dims) {
            row.iter_mut()
                .zip(&self.output_bias)
                .for_each(|(v, b)| *v += b);
        }
        norm_rows(&norm(None, s.eps), &mut y, s.output_dims);
        Ok(products(&self.projector, &y, n))
    }
}

/// The soft tokens a piece with frame mask `mask` makes, the `<|audio|>` placeholders its prompt
/// holds: the mask through the two stride-2 convolutions (`mask[::2][::2]`, transformers'
/// `Gemma4Processor.replace_audio_token`), counted where it is audio.
pub fn soft_tokens(mask: &[bool]) -> usize {
    mask.iter().step_by(4).filter(|&&m| m).count()
}

/// The audio tower of the Hugging Face checkpoint at `path` (its directory or a file in it),
/// with a clear error when it has none.
pub fn open(path: &Path) -> Result<AudioTower> {
    deferred(path)?.open()
}

/// [`open`] in two steps: the checkpoint's audio spec now, its weights when opened.
fn deferred(path: &Path) -> Result<Deferred<AudioTower, AudioSpec>> {
    if is_gguf(path) {
        return Err(Error::Invalid(format!(
            "{} is a GGUF file, which holds the text tower only: its audio tower is in the \
             mmproj GGUF that llama.cpp's converter writes with --mmproj; pass it with --mmproj \
             FILE or put it beside the model as mmproj*.gguf",
            path.display()
        )));
    }
    let dir = crate::weights::model_dir(path);
    let spec = spec_of(&dir)?.ok_or_else(|| {
        Error::Invalid(format!(
            "this model has no audio tower (audio is E2B/E4B only): the config.json in {} has \
             no audio_config",
            dir.display()
        ))
    })?;
    let load_spec = spec.clone();
    let load = Box::new(move || {
        let src = crate::weights::safetensors::SafetensorsSource::open(&dir)?;
        AudioTower::load(load_spec, &src)
    });
    Ok(Deferred { spec, load })
}

/// The audio tower for the model `lm`: the mmproj file `mmproj` names, else the checkpoint's
/// own, else an `mmproj*.gguf` beside it (a GGUF model's only source).
pub fn open_for(lm: &LoadedModel, mmproj: Option<&Path>) -> Result<AudioTower> {
    deferred_for(lm, mmproj)?.open()
}

/// [`open_for`] in two steps: the tower's spec now, its weights when opened.
pub fn deferred_for(
    lm: &LoadedModel,
    mmproj: Option<&Path>,
) -> Result<Deferred<AudioTower, AudioSpec>> {
    let dir = crate::weights::model_dir(&lm.path);
    let file = match mmproj {
        Some(p) => p.to_path_buf(),
        None if !is_gguf(&lm.path) && spec_of(&dir)?.is_some() => return deferred(&lm.path),
        None => match crate::vision::mmproj_beside(&dir)? {
            Some(p) => p,
            None => return deferred(&lm.path),
        },
    };
    let m = AudioMmproj::open(&file, lm.model.config().hidden_size, audio_ids(lm)?)?;
    let spec = m.spec().clone();
    let load = Box::new(move || AudioTower::load(m.spec().clone(), &m));
    Ok(Deferred { spec, load })
}

/// The audio ids of `lm`'s prompts: its checkpoint's `config.json`, else its tokenizer's
/// `<|audio|>`, `<|audio>` and `<audio|>`, else Gemma 4's; checked against the vocabulary.
fn audio_ids(lm: &LoadedModel) -> Result<AudioIds> {
    let dir = crate::weights::model_dir(&lm.path);
    let from_config = spec_of(&dir)
        .ok()
        .flatten()
        .map(|s| [s.audio_token_id, s.boa_token_id, s.eoa_token_id]);
    let lookup = Lookup {
        from_config,
        names: ["<|audio|>", "<|audio>", "<audio|>"],
        hint: None,
        default: [258_881, 256_000, 258_883],
    };
    let [audio, boa, eoa] = resolve(lm, lookup).ok_or_else(|| {
        Error::Invalid(format!(
            "the model's vocabulary ({} ids) has no audio tokens (<|audio|>, <|audio>, \
             <audio|>): this model has no audio tower (audio is E2B/E4B only)",
            lm.model.config().vocab_size
        ))
    })?;
    Ok(AudioIds { audio, boa, eoa })
}

/// The audio side of the checkpoint in `dir` (its `config.json`), `None` when it has none.
pub fn spec_of(dir: &Path) -> Result<Option<AudioSpec>> {
    let path = dir.join("config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::config(&path, format!("not valid JSON: {e}")))?;
    AudioSpec::from_json(&value).map_err(|msg| Error::config(&path, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_tokens_count_every_fourth_frame_that_is_audio() {
        assert_eq!(soft_tokens(&[true; 101]), 26);
        let mut m = [true; 101];
        m[100] = false;
        assert_eq!(soft_tokens(&m), 25);
        m[97..].fill(false);
        assert_eq!(
            soft_tokens(&m),
            25,
            "frames 97..99 fall between the kept ones"
        );
        assert_eq!(soft_tokens(&[]), 0);
    }
}
