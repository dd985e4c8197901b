//! Loading a model directory and running one prompt through it: chunked prefill, then one-token
//! decode steps until a stop id or the token budget. Shared by the command line and the engine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::{Device, Tensor};

use crate::error::{Error, Result};
use crate::loader::gguf::{GgufFile, GgufSource};
use crate::loader::gguf_config::model_config;
use crate::loader::{self, safetensors::SafetensorsSource};
use crate::model::config::{Family, ModelConfig, token_ids};
use crate::model::{ComputeDtype, Gemma, KvCache, Logits, build::build};
use crate::sampling::{NextLogits, Sampler, SamplingParams};
use crate::tokenizer::template::{
    ChatFormat, Conversation, TemplateError, TemplateSource, TurnText,
};
use crate::tokenizer::{self, Tokenizer};

/// A model with what is needed to talk to it.
#[derive(Debug)]
pub struct LoadedModel {
    /// The weights.
    pub model: Gemma,
    /// The tokenizer, when the checkpoint ships one.
    pub tokenizer: Option<Tokenizer>,
    /// Ids the checkpoint declares as ending generation (what transformers stops on).
    pub stop_ids: Vec<u32>,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// The chat templates: the checkpoint's own, if any, and the family's built-in layout.
    pub chat: ChatFormat,
}

impl LoadedModel {
    /// A new user turn in the conversation `c`, rendered with the checkpoint's template, or with
    /// the built-in layout when it has none or it fails (its error comes back beside the turn).
    /// Thinking is off for a model without a thinking mode.
    pub fn next_turn(
        &self,
        c: &Conversation,
        text: &str,
    ) -> Result<(TurnText, Option<TemplateError>)> {
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
    pub fn prompt_ids(
        &self,
        history: &[u32],
        header_len: usize,
        turn: &TurnText,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let tok = self.tokenizer.as_ref().ok_or_else(|| {
            Error::Invalid("this model has no tokenizer, so it cannot chat".into())
        })?;
        let header = tok.encode(&turn.header)?;
        let mut prompt = vec![self.model.config().bos_token_id];
        if history.is_empty() {
            // One piece, so that the first message tokenizes as it does in the template's render,
            // unless that would move the header's last token.
            let whole = tok.encode(&format!("{}{}", turn.header, turn.turn))?;
            if whole.starts_with(&header) {
                prompt.extend(whole);
                return Ok((prompt, header));
            }
        }
        prompt.extend(&header);
        if let Some(exchanges) = history.get(1 + header_len..) {
            prompt.extend(exchanges);
        }
        prompt.extend(tok.encode(&turn.turn)?);
        Ok((prompt, header))
    }

    /// The ids of a one-turn conversation: BOS, then `text` as the first user turn.
    pub fn single_turn_ids(&self, text: &str) -> Result<Vec<u32>> {
        let c = Conversation {
            system: None,
            thinking: false,
            continues: false,
        };
        let (t, _) = self.next_turn(&c, text)?;
        Ok(self.prompt_ids(&[], 0, &t)?.0)
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
    pub fn chat_stop_ids(&self) -> Vec<u32> {
        let mut ids = self.stop_ids.clone();
        for id in family_stop_ids(self.model.config().family) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

/// Loads a model: a Hugging Face directory (config.json, safetensors, optional tokenizer.json and
/// generation_config.json) or a GGUF file (or a directory holding one GGUF file).
pub fn load(
    path: &Path,
    device: &Device,
    dtype: ComputeDtype,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LoadedModel> {
    if !path.exists() {
        return Err(Error::Invalid(format!(
            "model path {} does not exist: point --model at a model directory (config.json + \
             *.safetensors) or a .gguf file",
            path.display()
        )));
    }
    if let Some(gguf) = gguf_path(path) {
        return load_gguf(&gguf, device, dtype, progress);
    }
    if path.is_file() {
        return Err(Error::Invalid(format!(
            "{} is neither a .gguf file nor a model directory (config.json + *.safetensors)",
            path.display()
        )));
    }
    let dir = loader::model_dir(path);
    let config = ModelConfig::from_file(&dir.join("config.json"))?;
    let source = SafetensorsSource::open(&dir)?;
    let model = build(config, &source, device, dtype, progress)?;
    let tokenizer = dir_tokenizer(&dir)?;
    let stop_ids = stop_ids(&dir, model.config());
    let chat = chat_format(
        TemplateSource::from_dir(&dir)?.as_ref(),
        model.config(),
        tokenizer.as_ref(),
    );
    Ok(LoadedModel {
        model,
        tokenizer,
        stop_ids,
        path: dir,
        chat,
    })
}

/// The GGUF file `path` names: the path itself, or the only `.gguf` in a directory without a
/// config.json.
fn gguf_path(path: &Path) -> Option<PathBuf> {
    let is_gguf = |p: &Path| {
        p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    };
    if path.is_file() {
        return is_gguf(path).then(|| path.to_path_buf());
    }
    if path.join("config.json").exists() {
        return None;
    }
    let found: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_gguf(p))
        .collect();
    (found.len() == 1).then(|| found[0].clone())
}

fn load_gguf(
    path: &Path,
    device: &Device,
    dtype: ComputeDtype,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LoadedModel> {
    let file = GgufFile::open(path)?;
    let config = model_config(&file)?;
    let tokenizer = Some(tokenizer::gguf::from_gguf(&file)?);
    let template = gguf_template(&file);
    let chat = chat_format(template.as_ref(), &config, tokenizer.as_ref());
    let source = GgufSource::new(file);
    let model = build(config, &source, device, dtype, progress)?;
    // What the file declares, as transformers reads it: eos (and llama.cpp's end-of-turn id
    // when the converter stored one). Chat adds the family's turn ids on top.
    let mut stop_ids = model.config().eos_token_ids.clone();
    if let Some(eot) = source
        .file()
        .get("tokenizer.ggml.eot_token_id")
        .and_then(|v| v.as_u64())
        && !stop_ids.contains(&(eot as u32))
    {
        stop_ids.push(eot as u32);
    }
    Ok(LoadedModel {
        model,
        tokenizer,
        stop_ids,
        path: path.to_path_buf(),
        chat,
    })
}

/// The chat templates of the model at `path` (a directory or a GGUF file), read without its
/// weights.
pub fn chat_format_of(path: &Path) -> Result<ChatFormat> {
    if let Some(gguf) = gguf_path(path) {
        let file = GgufFile::open(&gguf)?;
        let config = model_config(&file)?;
        let tokenizer = tokenizer::gguf::from_gguf(&file)?;
        return Ok(chat_format(
            gguf_template(&file).as_ref(),
            &config,
            Some(&tokenizer),
        ));
    }
    let dir = loader::model_dir(path);
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
    ChatFormat::new(own, cfg.family, &bos, &eos)
}

fn family_stop_ids(family: Family) -> Vec<u32> {
    match family {
        Family::Gemma4 => vec![1, 106, 50],
        Family::Gemma3 => vec![1, 106],
    }
}

/// Stop ids as the reference resolves them: `generation_config.json`, else `config.json`, else
/// the family's defaults.
fn stop_ids(dir: &Path, cfg: &ModelConfig) -> Vec<u32> {
    let from_gen = std::fs::read_to_string(dir.join("generation_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| token_ids(v.get("eos_token_id")));
    match from_gen {
        Some(ids) if !ids.is_empty() => ids,
        _ if !cfg.eos_token_ids.is_empty() => cfg.eos_token_ids.clone(),
        _ => family_stop_ids(cfg.family),
    }
}

/// How to run one prompt.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Prefill chunk length.
    pub chunk: usize,
    /// Keep the logits of every prompt position (`--dump-logits`).
    pub prompt_logits: bool,
    /// Ids that end generation.
    pub stop_ids: Vec<u32>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop id was produced.
    Stop,
    /// `max_new_tokens` were produced.
    Length,
    /// The caller asked to stop.
    Cancelled,
}

impl Finish {
    /// The name used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Cancelled => "cancelled",
        }
    }
}

/// What one generation produced.
#[derive(Debug, Clone)]
pub struct GenerateOutput {
    /// Generated ids, the stop id included when one ended the turn.
    pub generated: Vec<u32>,
    /// Why it ended.
    pub finish: Finish,
    /// `[prompt_len, vocab]` row-major, when asked for.
    pub prompt_logits: Option<Vec<f32>>,
    /// Seconds spent in prefill.
    pub prefill_s: f64,
    /// Seconds spent in decode steps.
    pub decode_s: f64,
}

/// Runs `prompt` from the cache's current position, then decodes. `on_token` sees each new id
/// and returns false to stop.
pub fn generate(
    model: &Gemma,
    cache: &mut KvCache,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<GenerateOutput> {
    if prompt.is_empty() {
        return Err(Error::Invalid("the prompt is empty".into()));
    }
    let chunk = opts.chunk.max(1);
    let start = Instant::now();
    let mut all_logits = opts.prompt_logits.then(Vec::new);
    let mut last = None;
    let chunks: Vec<&[u32]> = prompt.chunks(chunk).collect();
    for (i, part) in chunks.iter().enumerate() {
        let is_last = i + 1 == chunks.len();
        let mode = match (opts.prompt_logits, is_last) {
            (true, _) => Logits::All,
            (false, true) => Logits::Last,
            (false, false) => Logits::None,
        };
        let pos = cache.len();
        let out = model.forward(part, cache, pos, mode)?;
        if let (Some(all), Some(l)) = (all_logits.as_mut(), out.as_ref()) {
            all.extend(to_vec(l.clone())?);
        }
        if is_last {
            last = out;
        }
    }
    let mut logits = match last {
        Some(l) => NextLogits::last_of(l),
        None => {
            return Err(Error::Backend(
                "the last prefill chunk returned no logits".into(),
            ));
        }
    };
    let prefill_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut sampler = Sampler::new(opts.sampling.clone());
    let mut generated = Vec::new();
    let mut finish = Finish::Length;
    while generated.len() < opts.max_new_tokens {
        let id = sampler.pick(logits)?;
        generated.push(id);
        if opts.stop_ids.contains(&id) {
            finish = Finish::Stop;
            break;
        }
        if !on_token(id) {
            finish = Finish::Cancelled;
            break;
        }
        if generated.len() == opts.max_new_tokens {
            break;
        }
        let pos = cache.len();
        let out = model
            .forward(&[id], cache, pos, Logits::Last)?
            .ok_or_else(|| Error::Backend("a decode step returned no logits".into()))?;
        logits = NextLogits::last_of(out);
    }
    Ok(GenerateOutput {
        generated,
        finish,
        prompt_logits: all_logits,
        prefill_s,
        decode_s: start.elapsed().as_secs_f64(),
    })
}

fn to_vec(t: Tensor<2>) -> Result<Vec<f32>> {
    t.into_data()
        .try_to_vec::<f32>()
        .map_err(|e| Error::Backend(format!("cannot read logits: {e:?}")))
}
