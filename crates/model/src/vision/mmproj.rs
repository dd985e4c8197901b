//! llama.cpp's mmproj GGUF (`general.architecture = clip`, projector `gemma4v` or `gemma4uv`)
//! read as the vision side of a checkpoint: the [`VisionSpec`] from its metadata and tensor
//! shapes, and its tensors under the Hugging Face names the towers load, in their stored GGML
//! types and in place. The converter re-lays three of them (the patch embedding's pixel order,
//! the 12B's first LayerNorm over those pixels, and the 12B's position table axes); those come
//! back as the towers take them. Audio tensors (`a.*`, `mm.a.*`) are [`crate::audio::mmproj`]'s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gemma_kernels::quant::GgmlType;
use gemma_kernels::{Blocks, Bytes};

use super::config::{TowerSpec, UnifiedSpec, VisionSpec, VitSpec};
use crate::error::{Error, Result};
use crate::model::config::ImageBlocks;
use crate::weights::gguf::{GgufFile, Value};
use crate::weights::{RawTensor, TensorSource, check_shape};

/// The image ids of the prompt layout, which the text side of a checkpoint declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageIds {
    /// The soft-token placeholder (`<|image|>`).
    pub image: u32,
    /// Before an image's placeholders (`<|image>`).
    pub boi: u32,
    /// After them (`<image|>`).
    pub eoi: u32,
}

/// How a tensor is stored differently from the Hugging Face layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relaid {
    /// As stored.
    No,
    /// The ViT's patch embedding: `[n, 3, p, p]` stored, `[n, p·p·3]` (row, column, channel).
    ChannelsFirst { p: usize },
    /// The 12B's dense patch embedding (columns) or its first LayerNorm (values) over a
    /// `p × p × 3` patch stored channel-first.
    PixelsPermuted { p: usize },
    /// The 12B's position table: `[2, P, w]` stored, `[P, 2, w]`.
    AxesSwapped,
}

/// An opened mmproj file seen through the Hugging Face names.
#[derive(Debug)]
pub struct Mmproj {
    file: GgufFile,
    /// Hugging Face name → (GGUF name, relayout).
    names: HashMap<String, (String, Relaid)>,
    spec: VisionSpec,
    rule: ImageBlocks,
}

impl Mmproj {
    /// Opens `path` for a decoder `text_hidden` wide whose prompts use `ids`.
    pub fn open(path: &Path, text_hidden: usize, ids: ImageIds) -> Result<Self> {
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
        let projector = str_key("clip.vision.projector_type")
            .or_else(|| str_key("clip.projector_type"))
            .unwrap_or_default();
        let unified = match projector.as_str() {
            "gemma4v" => false,
            "gemma4uv" => true,
            "" => return Err(bad("this mmproj has no vision encoder".into())),
            other => {
                return Err(bad(format!(
                    "the vision projector `{other}` is not Gemma 4's (gemma4v or gemma4uv)"
                )));
            }
        };
        let spec = spec_of(&file, unified, ids).map_err(bad)?;
        if spec.text_hidden != text_hidden {
            return Err(bad(format!(
                "this mmproj projects to width {}, but the model is {text_hidden} wide: it \
                 belongs to another model",
                spec.text_hidden
            )));
        }
        // transformers' configs pair `standardize` (26B/31B) with images seen both ways on the
        // sliding layers, and its absence (E2B/E4B) with causal images; the 12B's embedder
        // sees each image both ways on every layer.
        let rule = match &spec.tower {
            TowerSpec::Unified(_) => ImageBlocks::Every,
            TowerSpec::Vit(v) if v.standardize => ImageBlocks::Sliding,
            TowerSpec::Vit(_) => ImageBlocks::Causal,
        };
        let names = names(&file, &spec);
        Ok(Self {
            file,
            names,
            spec,
            rule,
        })
    }

    /// The tower it holds.
    pub fn spec(&self) -> &VisionSpec {
        &self.spec
    }

    /// How the decoder masks image positions for the model this projector belongs to.
    pub fn image_blocks(&self) -> ImageBlocks {
        self.rule
    }

    fn relaid(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some((g, how)) = self.names.get(name) else {
            return Ok(None);
        };
        let Some(t) = self.file.dequantize(g)? else {
            return Ok(None);
        };
        Ok(Some(relayout(t, *how)))
    }
}

impl TensorSource for Mmproj {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        self.relaid(name)
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let (g, how) = self.names.get(name)?;
        let s = self.file.tensors.get(g)?.shape.clone();
        Some(relaid_shape(&s, *how))
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
        let (g, how) = self.names.get(name).ok_or_else(missing)?;
        let b = if *how == Relaid::No {
            self.file.blocks(g)?.ok_or_else(missing)?
        } else {
            let t = self.relaid(name)?.ok_or_else(missing)?;
            let bytes = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            Blocks {
                ty: GgmlType::F32,
                shape: t.shape,
                bytes: Bytes::owned(bytes),
            }
        };
        check_shape(name, &b.shape, expected, self.path_of(name))?;
        Ok(b)
    }
}

/// The tower from the metadata and the stored shapes (which the converter leaves out of the
/// metadata: head width, key/value heads, position table size, clipping, `standardize`).
fn spec_of(
    file: &GgufFile,
    unified: bool,
    ids: ImageIds,
) -> std::result::Result<VisionSpec, String> {
    let num = |k: &str| file.get(k).and_then(Value::as_u64).map(|n| n as usize);
    let shape = |t: &str| file.tensors.get(t).map(|i| i.shape.clone());
    let need = |t: &str| shape(t).ok_or_else(|| format!("tensor `{t}` is missing"));
    let proj = need("mm.input_projection.weight")?;
    let pos = need("v.position_embd.weight")?;
    let (&text_hidden, &width) = (proj.first().unwrap_or(&0), proj.last().unwrap_or(&0));
    let tower = if unified {
        TowerSpec::Unified(UnifiedSpec {
            width,
            positions: pos.get(1).copied().unwrap_or(0),
        })
    } else {
        let hd = need("v.blk.0.attn_q_norm.weight")?[0];
        let kv = need("v.blk.0.attn_k.weight")?[0];
        let heads = num("clip.vision.attention.head_count").ok_or("no attention.head_count")?;
        let layers = num("clip.vision.block_count").ok_or("no clip.vision.block_count")?;
        if hd == 0 || kv % hd != 0 || heads == 0 || heads % (kv / hd).max(1) != 0 {
            return Err(format!(
                "{heads} heads over {kv} key/value values of width {hd} is not a Gemma 4 tower"
            ));
        }
        TowerSpec::Vit(VitSpec {
            hidden: width,
            layers,
            heads,
            kv_heads: kv / hd,
            head_dim: hd,
            intermediate: need("v.blk.0.ffn_gate.weight")?[0],
            positions: pos.get(1).copied().unwrap_or(0),
            // llama.cpp fixes θ at transformers' default (`clip.cpp`, the GEMMA4V case).
            theta: 100.0,
            clipped: file.tensors.contains_key("v.blk.0.attn_q.input_min"),
            standardize: file.tensors.contains_key("v.std_bias"),
        })
    };
    if pos.len() != 3 || pos[0] != 2 || pos[2] != width || width == 0 || text_hidden == 0 {
        return Err(format!(
            "the position table is {pos:?} for a tower {width} wide, not [2, positions, {width}]"
        ));
    }
    Ok(VisionSpec {
        tower,
        patch: num("clip.vision.patch_size").unwrap_or(16),
        pool: num("clip.vision.projector.scale_factor").unwrap_or(3),
        eps: file
            .get("clip.vision.attention.layer_norm_epsilon")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6),
        text_hidden,
        image_token_id: ids.image,
        boi_token_id: ids.boi,
        eoi_token_id: ids.eoi,
    })
}

/// Every Hugging Face name the towers load, with its GGUF name (llama.cpp's
/// `gguf-py/gguf/tensor_mapping.py` for Gemma 4).
fn names(file: &GgufFile, spec: &VisionSpec) -> HashMap<String, (String, Relaid)> {
    let mut m = HashMap::new();
    let mut put = |hf: String, g: &str, how: Relaid| {
        if file.tensors.contains_key(g) {
            m.insert(hf, (g.to_string(), how));
        }
    };
    put(
        "embed_vision.embedding_projection.weight".into(),
        "mm.input_projection.weight",
        Relaid::No,
    );
    let p = spec.patch;
    match &spec.tower {
        TowerSpec::Unified(_) => {
            let e = "vision_embedder";
            let big = Relaid::PixelsPermuted { p: p * spec.pool };
            put(
                format!("{e}.patch_dense.weight"),
                "v.patch_embd.weight",
                big,
            );
            put(
                format!("{e}.patch_dense.bias"),
                "v.patch_embd.bias",
                Relaid::No,
            );
            for (hf, i) in [("patch_ln1", 1), ("patch_ln2", 2), ("pos_norm", 3)] {
                let how = if i == 1 { big } else { Relaid::No };
                for part in ["weight", "bias"] {
                    put(
                        format!("{e}.{hf}.{part}"),
                        &format!("v.patch_norm.{i}.{part}"),
                        how,
                    );
                }
            }
            put(
                format!("{e}.pos_embedding"),
                "v.position_embd.weight",
                Relaid::AxesSwapped,
            );
        }
        TowerSpec::Vit(v) => {
            let t = "vision_tower";
            put(
                format!("{t}.patch_embedder.input_proj.weight"),
                "v.patch_embd.weight",
                Relaid::ChannelsFirst { p },
            );
            put(
                format!("{t}.patch_embedder.position_embedding_table"),
                "v.position_embd.weight",
                Relaid::No,
            );
            put(format!("{t}.std_bias"), "v.std_bias", Relaid::No);
            put(format!("{t}.std_scale"), "v.std_scale", Relaid::No);
            for i in 0..v.layers {
                for (hf, g) in layer_names() {
                    let hf_name = format!("{t}.encoder.layers.{i}.{hf}");
                    put(hf_name, &format!("v.blk.{i}.{g}"), Relaid::No);
                }
            }
        }
    }
    m
}

/// A ViT layer's norms: Hugging Face suffix → GGUF suffix.
const NORMS: [(&str, &str); 6] = [
    ("input_layernorm.weight", "ln1.weight"),
    ("post_attention_layernorm.weight", "attn_post_norm.weight"),
    ("pre_feedforward_layernorm.weight", "ln2.weight"),
    ("post_feedforward_layernorm.weight", "ffn_post_norm.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
];

/// A ViT layer's projections, each with its clamps when clipped.
const LINEARS: [(&str, &str); 7] = [
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_out"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// A ViT layer's (Hugging Face suffix, GGUF suffix) pairs.
fn layer_names() -> impl Iterator<Item = (String, String)> {
    let norms = NORMS.iter().map(|(h, g)| (h.to_string(), g.to_string()));
    let linears = LINEARS.iter().flat_map(|(h, g)| {
        let clamps = ["input_min", "input_max", "output_min", "output_max"]
            .into_iter()
            .map(move |c| (format!("{h}.{c}"), format!("{g}.{c}")));
        std::iter::once((format!("{h}.linear.weight"), format!("{g}.weight"))).chain(clamps)
    });
    norms.chain(linears)
}

fn relaid_shape(s: &[usize], how: Relaid) -> Vec<usize> {
    match (how, s) {
        (Relaid::ChannelsFirst { .. }, [n, c, h, w]) => vec![*n, c * h * w],
        (Relaid::AxesSwapped, [a, p, w]) => vec![*p, *a, *w],
        _ => s.to_vec(),
    }
}

/// transformers' layout of a tensor the converter re-laid.
fn relayout(t: RawTensor, how: Relaid) -> RawTensor {
    let shape = relaid_shape(&t.shape, how);
    let d = &t.data;
    let data = match (how, t.shape.as_slice()) {
        (Relaid::ChannelsFirst { p }, &[n, 3, h, w]) if h == p && w == p => {
            // stored [o][ch][r][c] → [o][(r·p + c)·3 + ch]
            let per = 3 * p * p;
            let mut out = vec![0.0; n * per];
            for o in 0..n {
                for ch in 0..3 {
                    for rc in 0..p * p {
                        out[o * per + rc * 3 + ch] = d[o * per + ch * p * p + rc];
                    }
                }
            }
            out
        }
        (Relaid::PixelsPermuted { p }, s) if s.last() == Some(&(3 * p * p)) => {
            // Stored position i (channel-first) holds transformers' (row, column, channel)
            // position `perm(i)`.
            let per = 3 * p * p;
            let perm = |i: usize| {
                let (ch, rc) = (i / (p * p), i % (p * p));
                rc * 3 + ch
            };
            let mut out = vec![0.0; d.len()];
            for (row_in, row_out) in d.chunks_exact(per).zip(out.chunks_exact_mut(per)) {
                for (i, &v) in row_in.iter().enumerate() {
                    row_out[perm(i)] = v;
                }
            }
            out
        }
        (Relaid::AxesSwapped, &[a, p, w]) => {
            let mut out = vec![0.0; d.len()];
            for axis in 0..a {
                for pos in 0..p {
                    let from = (axis * p + pos) * w;
                    let to = (pos * a + axis) * w;
                    out[to..to + w].copy_from_slice(&d[from..from + w]);
                }
            }
            out
        }
        _ => return t,
    };
    RawTensor { shape, data }
}
