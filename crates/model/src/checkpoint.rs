//! Loading a model ([`load`]): its weights, tokenizer, chat templates and end ids, from a Hugging
//! Face directory or a GGUF file, each read once; and assembling a user turn in ids
//! ([`LoadedModel::user_turn`]), the one place a conversation turn is built.

use std::path::{Path, PathBuf};

use burn::tensor::Device;

use crate::error::{Error, Result};
use crate::model::config::{Family, ModelConfig, token_ids};
use crate::model::gguf_config::model_config;
use crate::model::{ComputeDtype, Gemma, GpuWeights, build::build};
use crate::sampling::SamplingLayer;
use crate::tokenizer::template::{
    Builtin, ChatFormat, Conversation, Media, TemplateError, TemplateSource, TurnText,
};
use crate::tokenizer::{self, Tokenizer};
use crate::weights::gguf::{GgufFile, GgufSource};
use crate::weights::{self, safetensors::SafetensorsSource};

/// A model with what is needed to talk to it.
#[derive(Debug)]
pub struct LoadedModel {
    /// The weights.
    pub model: Gemma,
    /// The tokenizer, when the checkpoint ships one.
    pub tokenizer: Option<Tokenizer>,
    /// Ids the checkpoint declares as ending generation (what transformers stops on).
    pub end_ids: Vec<u32>,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// The chat templates: the checkpoint's own, if any, and the family's built-in layout.
    pub chat: ChatFormat,
    /// The sampling defaults the checkpoint declares (`generation_config.json`).
    pub generation: SamplingLayer,
}

impl LoadedModel {
    /// A new user turn in the conversation `c`, rendered with the checkpoint's template, or with
    /// the built-in layout when it has none or it fails (its error comes back beside the turn).
    /// Thinking is off for a model without a thinking mode.
    fn next_turn(&self, c: &Conversation, text: &str) -> Result<(TurnText, Option<TemplateError>)> {
        let c = Conversation {
            thinking: c.thinking && self.supports_thinking(),
            ..*c
        };
        Ok(self.chat.next_turn(&c, text)?)
    }

    /// The whole prompt of a new turn, and its header's ids. `history` is the conversation so
    /// far in ids (BOS, a header of `header_len` ids, the earlier exchanges up to the end of the
    /// last answer; empty for a new conversation): its header is replaced by the turn's, its
    /// exchanges are kept as they are, and the turn's text follows.
    fn prompt_ids(
        &self,
        history: &[u32],
        header_len: usize,
        turn: &TurnText,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let tok = self.tokenizer.as_ref().ok_or_else(|| {
            Error::Invalid("this model has no tokenizer, so it cannot chat".into())
        })?;
        // Only the template writes control tokens: in the system prompt and the message (typed,
        // pasted or attached) a control token's text is plain text.
        let system: Vec<_> = turn.system.clone().into_iter().collect();
        let header = tok.encode_guarded(&turn.header, &system)?;
        let mut prompt = vec![self.model.config().bos_token_id];
        if history.is_empty() {
            // One piece, so that the first message tokenizes as it does in the template's render,
            // unless that would move the header's last token.
            let n = turn.header.len();
            let mut guarded = system.clone();
            guarded.push(turn.user.start + n..turn.user.end + n);
            let whole = tok.encode_guarded(&format!("{}{}", turn.header, turn.turn), &guarded)?;
            if whole.starts_with(&header) {
                prompt.extend(whole);
                return Ok((prompt, header));
            }
        }
        prompt.extend(&header);
        if let Some(exchanges) = history.get(1 + header_len..) {
            prompt.extend(exchanges);
        }
        prompt.extend(tok.encode_guarded(&turn.turn, std::slice::from_ref(&turn.user))?);
        Ok((prompt, header))
    }

    /// A new user turn after `history` (the conversation so far in ids, up to the end of the
    /// last answer, with a header of `header_len` ids after BOS; empty for a new conversation):
    /// the one place a conversation turn is assembled. History stays in ids; only the header
    /// (which changes when thinking is toggled or the system prompt changes) and the new turn
    /// are rendered. `tools` are the declarations the model may call (the list
    /// transformers' `apply_chat_template(tools=…)` takes), part of the header.
    #[allow(
        clippy::too_many_arguments,
        reason = "each is one part of the turn; the engine passes them from its tab"
    )]
    pub fn user_turn(
        &self,
        history: &[u32],
        header_len: usize,
        system: Option<&str>,
        thinking: bool,
        text: &str,
        media: &[Media],
        tools: Option<&serde_json::Value>,
    ) -> Result<UserTurn> {
        let c = Conversation {
            system,
            thinking,
            continues: !history.is_empty(),
            media,
            tools,
        };
        let (turn, template_error) = self.next_turn(&c, text)?;
        let template_slow = self.chat.take_slow();
        let (prompt, header) = self.prompt_ids(history, header_len, &turn)?;
        Ok(UserTurn {
            prompt,
            header,
            template_error,
            template_slow,
        })
    }

    /// Whether the model has a thinking mode (Gemma 4 with its channel and think tokens).
    pub fn supports_thinking(&self) -> bool {
        self.model.config().family == Family::Gemma4
            && self.tokenizer.as_ref().is_some_and(|t| {
                t.token_id("<|think|>").is_some() && t.token_id("<|channel>").is_some()
            })
    }

    /// Ids that end a chat turn: the declared ones plus the family's end-of-turn ids (Gemma 4:
    /// 1, 106, 50; Gemma 3: 1, 106), since base checkpoints often declare only `<eos>`.
    pub fn chat_end_ids(&self) -> Vec<u32> {
        let mut ids = self.end_ids.clone();
        for id in family_end_ids(self.model.config().family) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

/// What a checkpoint's `generation_config.json` declares, read once, at load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationConfig {
    /// `eos_token_id`: the ids the reference ends generation on.
    pub eos_token_ids: Option<Vec<u32>>,
    /// The sampling defaults (greedy when it says `do_sample: false`, as transformers reads
    /// it).
    pub sampling: SamplingLayer,
}

impl GenerationConfig {
    /// The `generation_config.json` in a model directory, or beside a GGUF file; empty when
    /// there is none or it does not parse.
    pub fn read(model: &Path) -> Self {
        let file = if model.is_dir() {
            model.join("generation_config.json")
        } else {
            model.with_file_name("generation_config.json")
        };
        let Some(json) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        else {
            return Self::default();
        };
        let f32_of = |k: &str| json.get(k).and_then(|v| v.as_f64()).map(|v| v as f32);
        let sampling = if json.get("do_sample").and_then(|v| v.as_bool()) == Some(false) {
            SamplingLayer {
                temperature: Some(0.0),
                ..SamplingLayer::default()
            }
        } else {
            SamplingLayer {
                temperature: f32_of("temperature"),
                top_k: json
                    .get("top_k")
                    .and_then(|v| v.as_u64())
                    .map(|v| v as usize),
                top_p: f32_of("top_p"),
                min_p: f32_of("min_p"),
                seed: None,
            }
        };
        Self {
            eos_token_ids: token_ids(json.get("eos_token_id")),
            sampling,
        }
    }
}

/// A user turn ready to run.
#[derive(Debug, Clone)]
pub struct UserTurn {
    /// The whole conversation in ids: BOS, the header, the history's exchanges, the new turn.
    pub prompt: Vec<u32>,
    /// The header's ids (after BOS).
    pub header: Vec<u32>,
    /// The checkpoint's template failed and the built-in layout stood in.
    pub template_error: Option<TemplateError>,
    /// The checkpoint's template was slow to render this turn: what to tell the user.
    pub template_slow: Option<String>,
}

/// Loads a model: a Hugging Face directory (config.json, safetensors, optional tokenizer.json and
/// generation_config.json) or a GGUF file (or a directory holding one GGUF file). A GGUF's
/// quantized weights stay in their blocks on a GPU ([`GpuWeights::Quantized`]).
pub fn load(
    path: &Path,
    device: &Device,
    dtype: ComputeDtype,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LoadedModel> {
    load_with(path, device, dtype, GpuWeights::default(), progress)
}

/// [`load`], with how quantized weights sit on a GPU.
pub fn load_with(
    path: &Path,
    device: &Device,
    dtype: ComputeDtype,
    gpu_weights: GpuWeights,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LoadedModel> {
    if !path.exists() {
        return Err(Error::Invalid(format!(
            "model path {} does not exist: point --model at a model directory (config.json + \
             *.safetensors) or a .gguf file",
            path.display()
        )));
    }
    if !path.is_file() && !path.is_dir() {
        return Err(Error::Invalid(format!(
            "{} is neither a file nor a directory: point --model at a model directory \
             (config.json + *.safetensors) or a .gguf file",
            path.display()
        )));
    }
    if let Some(gguf) = gguf_path(path)? {
        return load_gguf(&gguf, device, dtype, gpu_weights, progress);
    }
    if path.is_file() {
        return Err(Error::Invalid(format!(
            "{} is neither a .gguf file nor a model directory (config.json + *.safetensors)",
            path.display()
        )));
    }
    let dir = weights::model_dir(path);
    let config = ModelConfig::from_file(&dir.join("config.json"))?;
    let source = SafetensorsSource::open(&dir)?;
    let model = build(config, &source, device, dtype, gpu_weights, progress)?;
    let tokenizer = dir_tokenizer(&dir)?;
    let generation = GenerationConfig::read(&dir);
    let end_ids = end_ids(generation.eos_token_ids, model.config());
    let chat = chat_format(
        TemplateSource::from_dir(&dir)?.as_ref(),
        model.config(),
        tokenizer.as_ref(),
    );
    Ok(LoadedModel {
        model,
        tokenizer,
        end_ids,
        path: dir,
        chat,
        generation: generation.sampling,
    })
}

/// The GGUF file `path` names: the path itself, or the only `.gguf` in a directory without a
/// config.json.
fn gguf_path(path: &Path) -> Result<Option<PathBuf>> {
    let is_gguf = |p: &Path| {
        p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    };
    if path.is_file() {
        return Ok(is_gguf(path).then(|| path.to_path_buf()));
    }
    if path.join("config.json").exists() {
        return Ok(None);
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return Ok(None);
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_gguf(p))
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        n => Err(Error::Invalid(format!(
            "{} holds {n} .gguf files ({}): name one, e.g. --model {}",
            path.display(),
            found
                .iter()
                .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", "),
            found[0].display()
        ))),
    }
}

fn load_gguf(
    path: &Path,
    device: &Device,
    dtype: ComputeDtype,
    gpu_weights: GpuWeights,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LoadedModel> {
    let file = GgufFile::open(path)?;
    let config = model_config(&file)?;
    let tokenizer = Some(tokenizer::gguf::from_gguf(&file)?);
    let template = gguf_template(&file);
    let chat = chat_format(template.as_ref(), &config, tokenizer.as_ref());
    let source = GgufSource::new(file);
    let model = build(config, &source, device, dtype, gpu_weights, progress)?;
    // What the file declares, as transformers reads it: eos (and llama.cpp's end-of-turn id
    // when the converter stored one). Chat adds the family's turn ids on top.
    let mut end_ids = model.config().eos_token_ids.clone();
    if let Some(eot) = source
        .file()
        .get("tokenizer.ggml.eot_token_id")
        .and_then(|v| v.as_u64())
        && !end_ids.contains(&(eot as u32))
    {
        end_ids.push(eot as u32);
    }
    Ok(LoadedModel {
        model,
        tokenizer,
        end_ids,
        path: path.to_path_buf(),
        chat,
        generation: GenerationConfig::read(path).sampling,
    })
}

/// The chat templates of the model at `path` (a directory or a GGUF file), read without its
/// weights.
pub fn chat_format_of(path: &Path) -> Result<ChatFormat> {
    if let Some(gguf) = gguf_path(path)? {
        let file = GgufFile::open(&gguf)?;
        let config = model_config(&file)?;
        let tokenizer = tokenizer::gguf::from_gguf(&file)?;
        return Ok(chat_format(
            gguf_template(&file).as_ref(),
            &config,
            Some(&tokenizer),
        ));
    }
    let dir = weights::model_dir(path);
    let config = ModelConfig::from_file(&dir.join("config.json"))?;
    let tokenizer = dir_tokenizer(&dir)?;
    Ok(chat_format(
        TemplateSource::from_dir(&dir)?.as_ref(),
        &config,
        tokenizer.as_ref(),
    ))
}

/// A model directory's `tokenizer.json`, if it ships one.
fn dir_tokenizer(dir: &Path) -> Result<Option<Tokenizer>> {
    let path = dir.join("tokenizer.json");
    path.exists()
        .then(|| Tokenizer::from_file(&path))
        .transpose()
}

/// The chat template a GGUF file carries (`tokenizer.chat_template`).
pub fn gguf_template(file: &GgufFile) -> Option<TemplateSource> {
    let text = file.get("tokenizer.chat_template")?.as_str()?;
    Some(TemplateSource {
        text: text.to_string(),
        origin: "the GGUF's tokenizer.chat_template".into(),
    })
}

/// The chat templates of a checkpoint: `own` if it ships one, with the BOS and EOS texts of its
/// tokenizer, over the family's built-in layout.
fn chat_format(
    own: Option<&TemplateSource>,
    cfg: &ModelConfig,
    tok: Option<&Tokenizer>,
) -> ChatFormat {
    let text = |id: Option<u32>, default: &str| {
        id.and_then(|id| tok?.token(id))
            .unwrap_or_else(|| default.to_string())
    };
    let bos = text(Some(cfg.bos_token_id), "<bos>");
    let eos = text(cfg.eos_token_ids.first().copied(), "<eos>");
    let builtin = match cfg.family {
        Family::Gemma3 => Builtin::Gemma3,
        Family::Gemma4 => Builtin::Gemma4,
    };
    ChatFormat::new(own, builtin, &bos, &eos)
}

fn family_end_ids(family: Family) -> Vec<u32> {
    match family {
        Family::Gemma4 => vec![1, 106, 50],
        Family::Gemma3 => vec![1, 106],
    }
}

/// End ids as the reference resolves them: `generation_config.json`, else `config.json`, else
/// the family's defaults.
fn end_ids(from_generation: Option<Vec<u32>>, cfg: &ModelConfig) -> Vec<u32> {
    match from_generation {
        Some(ids) if !ids.is_empty() => ids,
        _ if !cfg.eos_token_ids.is_empty() => cfg.eos_token_ids.clone(),
        _ => family_end_ids(cfg.family),
    }
}
