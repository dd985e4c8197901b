//! llama.cpp's mmproj GGUF (`general.architecture = clip`, `clip.has_audio_encoder`, audio
//! projector `gemma4a`) read as the audio side of a checkpoint: the [`AudioSpec`] from its
//! metadata and tensor shapes, and its `a.*` / `mm.a.*` tensors under the Hugging Face names the
//! tower loads, in their stored GGML types and in place. The same file's vision tensors are
//! [`crate::vision::mmproj`]'s. The converter stores `per_dim_scale` after its softplus; that
//! one comes back under its own name (`…per_dim_scale_softplus`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::config::AudioSpec;
use crate::error::{Error, Result};
use crate::weights::gguf::{GgufFile, Value};
use crate::weights::{Blocks, RawTensor, TensorSource, check_shape};

/// The audio ids of the prompt layout, which the text side of a checkpoint declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudioIds {
    /// The soft-token placeholder (`<|audio|>`).
    pub audio: u32,
    /// Before a clip's placeholders (`<|audio>`).
    pub boa: u32,
    /// After them (`<audio|>`).
    pub eoa: u32,
}

/// An opened mmproj file's audio tower seen through the Hugging Face names.
#[derive(Debug)]
pub struct AudioMmproj {
    file: GgufFile,
    /// Hugging Face name → GGUF name.
    names: HashMap<String, String>,
    spec: AudioSpec,
}

impl AudioMmproj {
    /// Opens `path` for a decoder `text_hidden` wide whose prompts use `ids`.
    pub fn open(path: &Path, text_hidden: usize, ids: AudioIds) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let bad = |msg: String| Error::config(path, msg);
        let str_key = |k: &str| file.get(k).and_then(Value::as_str).map(str::to_string);
        if str_key("general.architecture").as_deref() != Some("clip") {
            return Err(bad(
                "not an mmproj file (general.architecture is not `clip`): --mmproj takes the \
                 projector GGUF that llama.cpp's converter writes with --mmproj"
                    .into(),
            ));
        }
        let has_audio = file
            .get("clip.has_audio_encoder")
            .and_then(Value::as_u64)
            .is_some_and(|b| b != 0);
        match str_key("clip.audio.projector_type").as_deref() {
            Some("gemma4a") if has_audio => {}
            None | Some(_) if !has_audio => {
                return Err(bad(
                    "this mmproj has no audio encoder: this model has no audio tower (audio is \
                     E2B/E4B only)"
                        .into(),
                ));
            }
            other => {
                return Err(bad(format!(
                    "the audio projector `{}` is not Gemma 4 E2B/E4B's (gemma4a)",
                    other.unwrap_or("")
                )));
            }
        }
        let spec = spec_of(&file, ids).map_err(bad)?;
        if spec.text_hidden != text_hidden {
            return Err(bad(format!(
                "this mmproj's audio embedder projects to width {}, but the model is \
                 {text_hidden} wide: it belongs to another model",
                spec.text_hidden
            )));
        }
        let names = names(&file, spec.layers);
        Ok(Self { file, names, spec })
    }

    /// The tower it holds.
    pub fn spec(&self) -> &AudioSpec {
        &self.spec
    }
}

impl TensorSource for AudioMmproj {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        match self.names.get(name) {
            Some(g) => self.file.dequantize(g),
            None => Ok(None),
        }
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        Some(self.file.tensors.get(self.names.get(name)?)?.shape.clone())
    }

    fn path_of(&self, _name: &str) -> PathBuf {
        self.file.path().to_path_buf()
    }

    fn blocks(&self, name: &str, expected: &[usize]) -> Result<Blocks> {
        let missing = || Error::MissingTensor {
            name: name.to_string(),
            expected: expected.to_vec(),
            path: self.path_of(name),
        };
        let g = self.names.get(name).ok_or_else(missing)?;
        let b = self.file.blocks(g)?.ok_or_else(missing)?;
        check_shape(name, &b.shape, expected, self.path_of(name))?;
        Ok(b)
    }
}

/// The tower from the metadata and the stored shapes. The converter writes neither the
/// chunking nor the softcap (llama.cpp fixes them at transformers' defaults, as here), and its
/// ε is wrong (llama.cpp's `clip.cpp` fixes it at 1e-6, as here).
fn spec_of(file: &GgufFile, ids: AudioIds) -> std::result::Result<AudioSpec, String> {
    let num = |k: &str| {
        file.get(k)
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .ok_or_else(|| format!("no {k}"))
    };
    let need = |t: &str| {
        file.tensors
            .get(t)
            .map(|i| i.shape.clone())
            .ok_or_else(|| format!("tensor `{t}` is missing"))
    };
    let at = |s: &[usize], i: usize| s.get(i).copied().unwrap_or(0);
    let (c0, c1) = (need("a.conv1d.0.weight")?, need("a.conv1d.1.weight")?);
    let out = need("a.pre_encode.out.weight")?;
    let spec = AudioSpec {
        mel_bins: num("clip.audio.num_mel_bins").unwrap_or(128),
        conv_channels: [at(&c0, 0), at(&c1, 0)],
        hidden: num("clip.audio.embedding_length")?,
        layers: num("clip.audio.block_count")?,
        heads: num("clip.audio.attention.head_count")?,
        conv_kernel: at(&need("a.blk.0.conv_dw.weight")?, 1),
        residual_weight: 0.5,
        chunk: 12,
        context_left: 13,
        context_right: 0,
        logit_cap: 50.0,
        invalid_logit: -1.0e9,
        gradient_clipping: 1e10,
        clipped: file.tensors.contains_key("a.blk.0.attn_q.input_min"),
        eps: 1e-6,
        output_dims: at(&out, 0),
        text_hidden: at(&need("mm.a.input_projection.weight")?, 0),
        audio_token_id: ids.audio,
        boa_token_id: ids.boa,
        eoa_token_id: ids.eoa,
    };
    if spec.heads == 0 || spec.conv_channels.contains(&0) || spec.output_dims == 0 {
        return Err("the audio tower's metadata and tensor shapes do not agree".into());
    }
    spec.check().map(|()| spec)
}

/// A conformer layer's projections (Hugging Face suffix → GGUF suffix), each with its clamps.
const LINEARS: [(&str, &str); 10] = [
    ("feed_forward1.ffw_layer_1", "ffn_up"),
    ("feed_forward1.ffw_layer_2", "ffn_down"),
    ("feed_forward2.ffw_layer_1", "ffn_up_1"),
    ("feed_forward2.ffw_layer_2", "ffn_down_1"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.post", "attn_out"),
    ("lconv1d.linear_start", "conv_pw1"),
    ("lconv1d.linear_end", "conv_pw2"),
];

/// A conformer layer's other tensors. The converter's table swaps the light conv's two norms'
/// names (`conv_norm` is the pre-norm), as llama.cpp's loader notes.
const OTHERS: [(&str, &str); 11] = [
    ("feed_forward1.pre_layer_norm.weight", "ffn_norm.weight"),
    (
        "feed_forward1.post_layer_norm.weight",
        "ffn_post_norm.weight",
    ),
    ("feed_forward2.pre_layer_norm.weight", "ffn_norm_1.weight"),
    (
        "feed_forward2.post_layer_norm.weight",
        "ffn_post_norm_1.weight",
    ),
    ("self_attn.relative_k_proj.weight", "attn_k_rel.weight"),
    ("self_attn.per_dim_scale_softplus", "per_dim_scale.weight"),
    ("norm_pre_attn.weight", "attn_pre_norm.weight"),
    ("norm_post_attn.weight", "attn_post_norm.weight"),
    ("norm_out.weight", "ln2.weight"),
    ("lconv1d.pre_layer_norm.weight", "conv_norm.weight"),
    ("lconv1d.conv_norm.weight", "norm_conv.weight"),
];

/// Every Hugging Face name the tower loads, with its GGUF name (llama.cpp's
/// `gguf-py/gguf/tensor_mapping.py` for Gemma 4's audio), where the file has it.
fn names(file: &GgufFile, layers: usize) -> HashMap<String, String> {
    let t = "audio_tower";
    let s = format!("{t}.subsample_conv_projection");
    let mut pairs = vec![
        (
            format!("{s}.input_proj_linear.weight"),
            "a.input_projection.weight".to_string(),
        ),
        (
            format!("{t}.output_proj.weight"),
            "a.pre_encode.out.weight".into(),
        ),
        (
            format!("{t}.output_proj.bias"),
            "a.pre_encode.out.bias".into(),
        ),
        (
            "embed_audio.embedding_projection.weight".into(),
            "mm.a.input_projection.weight".into(),
        ),
    ];
    for i in 0..2 {
        pairs.push((
            format!("{s}.layer{i}.conv.weight"),
            format!("a.conv1d.{i}.weight"),
        ));
        pairs.push((
            format!("{s}.layer{i}.norm.weight"),
            format!("a.conv1d.{i}.norm.weight"),
        ));
    }
    for i in 0..layers {
        let (hf, g) = (format!("{t}.layers.{i}"), format!("a.blk.{i}"));
        for (h, k) in OTHERS {
            pairs.push((format!("{hf}.{h}"), format!("{g}.{k}")));
        }
        pairs.push((
            format!("{hf}.lconv1d.depthwise_conv1d.weight"),
            format!("{g}.conv_dw.weight"),
        ));
        for (h, k) in LINEARS {
            pairs.push((format!("{hf}.{h}.linear.weight"), format!("{g}.{k}.weight")));
            for c in ["input_min", "input_max", "output_min", "output_max"] {
                pairs.push((format!("{hf}.{h}.{c}"), format!("{g}.{k}.{c}")));
            }
        }
    }
    pairs
        .into_iter()
        .filter(|(_, g)| file.tensors.contains_key(g))
        .collect()
}
