//! `gemma-chat generate` (headless, scriptable) and `gemma-chat --prompt` (one streamed answer).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use gemma_engine::protocol::{TurnEnd, TurnStats};
use gemma_engine::reply::{Piece, Reply};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::checkpoint::{LoadedModel, load_with};
use gemma_model::sampling::SamplingParams;
use gemma_model::{backend, demo, model::ComputeDtype};
use serde_json::json;

use gemma_app::config::sampling::{SamplingLayer, Source, resolve};

use super::front::random_seed;
use super::headless::{Headless, TabArgs};
use super::images::{ImageArgs, Run, encode, encode_audio, place};
use super::{ModelArgs, SamplingArgs};
use gemma_engine::protocol::MediaKind;

/// Arguments of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Prompt text: BOS, then the text with special-token strings recognised (no chat template
    /// unless --chat).
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    prompt: Option<String>,
    /// Prompt as comma-separated token ids, used as given (no BOS added).
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Send --prompt as a chat turn through the engine, as `gemma-chat --prompt` does (the
    /// chat template, the config's sampling, stop strings and context, presets, --system).
    #[arg(long, requires = "prompt", conflicts_with = "dump_logits")]
    chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Prefill chunk length in tokens.
    #[arg(long, default_value_t = 256)]
    chunk: usize,
    /// Write the logits of every prompt position to this safetensors file (tensor `logits`,
    /// `[T, vocab]`, f32).
    #[arg(long)]
    dump_logits: Option<PathBuf>,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    images: super::images::ImageArgs,
}

/// Loads the chosen model, or the demo model (fetched on first use) when none is named.
pub fn load_model(common: &ModelArgs) -> anyhow::Result<(LoadedModel, ComputeDtype)> {
    let choice = common.choice(&common.config()?)?;
    let device = backend::device_of(choice.backend)?;
    let path = match &choice.model {
        Some(path) => path.clone(),
        None => demo::ensure(&mut demo::print_progress())
            .context("no model given, and the demo model could not be fetched")?,
    };
    let dtype = choice.dtype_on(&device);
    let mut lm = load_with(&path, &device, dtype, choice.gpu_weights, &mut |_, _| {})
        .with_context(|| format!("loading {}", path.display()))?;
    lm.model.set_kv_dtype(choice.kv_dtype);
    Ok((lm, dtype))
}

/// The `--image` and `--audio` attachments encoded and placed on the placeholder runs of `ids`,
/// in the order of their places.
fn media(
    lm: &mut LoadedModel,
    common: &ModelArgs,
    args: &ImageArgs,
    ids: &[u32],
) -> anyhow::Result<Vec<gemma_engine::images::MediaSpan>> {
    if args.images.is_empty() && args.audio.is_empty() {
        return Ok(Vec::new());
    }
    let mmproj = common.choice(&common.config()?)?.mmproj;
    let mut out = Vec::new();
    if !args.images.is_empty() {
        let hint = gemma_model::vision::infer_ids(ids);
        let tower = gemma_model::vision::open_for(lm, mmproj.as_deref(), hint)?;
        let s = tower.spec();
        let run = Run {
            ids: [s.boi_token_id, s.image_token_id, s.eoi_token_id],
            kind: MediaKind::Image,
        };
        out.extend(place(ids, &run, encode(&tower, args)?)?);
    }
    if !args.audio.is_empty() {
        let tower = gemma_model::audio::open_for(lm, mmproj.as_deref())?;
        let s = tower.spec();
        let run = Run {
            ids: [s.boa_token_id, s.audio_token_id, s.eoa_token_id],
            kind: MediaKind::Audio,
        };
        out.extend(place(ids, &run, encode_audio(&tower, args)?)?);
    }
    out.sort_by_key(|i| i.at);
    Ok(out)
}

/// Runs `generate`. With `--chat`, one turn through the engine protocol as `--prompt` runs it
/// (sampling resolved as the UI resolves it). Otherwise the raw oracle path: the ids as given,
/// greedy unless `--temperature` (or its variable) says otherwise, so that scripts get
/// reproducible output by default; a seed unset or 0 is random.
pub fn run(
    args: GenerateArgs,
    common: &ModelArgs,
    s: &SamplingArgs,
    tab: &TabArgs,
    raw: bool,
) -> anyhow::Result<()> {
    if args.chat {
        return chat(&args, common, s, tab, raw);
    }
    let t0 = Instant::now();
    let (mut lm, dtype) = load_model(common)?;
    let load_s = t0.elapsed().as_secs_f64();
    // The oracle path says which cache it ran with: transformers keeps f32.
    let kv = super::bench::kv_dtype_name(&lm.model);
    if lm.model.host_kv_dtype() != Some(gemma_model::model::KvDtype::F32) {
        errln!(
            "note: the KV cache keeps {kv} keys and values (--kv-dtype f32 keeps them exact, as \
             transformers does)"
        );
    }
    let prompt_ids = prompt_ids(&args, &lm)?;
    let images = media(&mut lm, common, &args.images, &prompt_ids)?;
    let cfg = lm.model.config();
    let opts = raw_options(&args, s, &lm);
    let mut session = Session::new(&lm.model);
    let mut turn = Turn::start_with(&mut session, prompt_ids.clone(), images, opts)?;
    let (end, text) = stream(&lm, &mut session, &mut turn, !args.json, raw)?;
    if let (Some(path), Some(logits)) = (&args.dump_logits, turn.take_prompt_logits()) {
        write_logits(path, &logits, prompt_ids.len(), cfg.vocab_size)?;
    }
    let mut generated = turn.answer().to_vec();
    if let TurnEnd::EndOfTurn(id) = end {
        // The id that ended the answer is part of what the model produced.
        generated.push(id);
    }
    if args.json {
        let json = RawJson {
            prompt_ids: &prompt_ids,
            generated: &generated,
            text: &text,
            end,
            load_s,
            dtype: dtype.as_str(),
            kv_dtype: &kv,
        };
        outln!("{}", json.render(&turn.stats()))?;
    } else {
        outln!()?;
    }
    Ok(())
}

/// The raw path's turn: the ids as given, as transformers would continue them (its end ids, no
/// thought budget, the model's whole context).
fn raw_options(args: &GenerateArgs, s: &SamplingArgs, lm: &LoadedModel) -> TurnOptions {
    TurnOptions {
        max_new_tokens: args.max_new_tokens,
        sampling: raw_sampling(s),
        chunk: args.chunk,
        prompt_logits: args.dump_logits.is_some(),
        end_ids: lm.end_ids.clone(),
        context: lm.model.config().max_position_embeddings,
        boundary_snapshot: false,
        thinking: None,
        forced: Vec::new(),
        speculation: Default::default(),
    }
}

/// Runs `turn` to its end, its answer's text on stdout as it comes when `echo`: how it ended,
/// and the text.
fn stream(
    lm: &LoadedModel,
    session: &mut Session,
    turn: &mut Turn,
    echo: bool,
    raw: bool,
) -> anyhow::Result<(TurnEnd, String)> {
    let mut reply = Reply::new(None, Vec::new());
    let mut text = String::new();
    let stdout = std::io::stdout();
    let mut show = |piece: Option<Piece>| {
        if let Some(Piece::Answer(delta)) = piece {
            if echo {
                let mut out = stdout.lock();
                let _ = out.write_all(super::printable(&delta, raw).as_bytes());
                let _ = out.flush();
            }
            text.push_str(&delta);
        }
    };
    let end = turn.run(&lm.model, session, &mut |id| {
        if let Some(tok) = &lm.tokenizer
            && let Ok((piece, _)) = reply.push(tok, id)
        {
            show(piece);
        }
        true
    })?;
    if let Some(tok) = &lm.tokenizer {
        show(reply.finish(tok)?);
    }
    Ok((end, text))
}

/// What `generate --json` prints for the raw path.
struct RawJson<'a> {
    prompt_ids: &'a [u32],
    generated: &'a [u32],
    text: &'a str,
    end: TurnEnd,
    load_s: f64,
    dtype: &'a str,
    kv_dtype: &'a str,
}

impl RawJson<'_> {
    fn render(&self, stats: &TurnStats) -> serde_json::Value {
        let prefill_s = stats.prefilled_tokens as f64 / stats.prefill_tok_s.max(1e-9);
        let decode_s = stats.generated_tokens as f64 / stats.decode_tok_s.max(1e-9);
        json!({
            "prompt_ids": self.prompt_ids,
            "generated_ids": self.generated,
            "text": self.text,
            "finish_reason": finish_reason(self.end),
            "timings": {
                "load_s": self.load_s,
                "prefill_s": prefill_s,
                "decode_s": decode_s,
                "prefill_tok_s": stats.prefill_tok_s,
                "decode_tok_s": stats.decode_tok_s,
                "ttft_s": stats.ttft_s,
            },
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
        })
    }
}

/// `generate --chat`: one turn through the engine protocol; the text (or, with `--json`, the
/// text, how it ended and its timings).
fn chat(
    args: &GenerateArgs,
    common: &ModelArgs,
    s: &SamplingArgs,
    tab: &TabArgs,
    raw: bool,
) -> anyhow::Result<()> {
    let prompt = args
        .prompt
        .as_deref()
        .context("--chat needs --prompt TEXT")?;
    let images = args.images.attachments()?;
    let t0 = Instant::now();
    let mut chat = Headless::open(common, s, tab, Some(args.max_new_tokens), raw)?;
    let load_s = t0.elapsed().as_secs_f64();
    chat.echo = !args.json;
    let a = chat.turn_with(prompt, images)?;
    if args.json {
        let st = &a.stats;
        let obj = json!({
            "text": a.text,
            "finish_reason": finish_reason(a.end),
            "reuse": st.reuse.as_str(),
            "prompt_tokens": st.reused_tokens + st.prefilled_tokens,
            "generated_tokens": st.generated_tokens,
            "tool_calls": st.tool_calls,
            "tool_tokens": st.tool_tokens,
            "timings": {
                "load_s": load_s,
                "prefill_tok_s": st.prefill_tok_s,
                "decode_tok_s": st.decode_tok_s,
                "ttft_s": st.ttft_s,
            },
        });
        outln!("{obj}")?;
    }
    Ok(())
}

/// The raw path's sampling: the flags and their variables over greedy decoding (the config
/// file is not read here: an oracle run depends on its command line only).
fn raw_sampling(s: &SamplingArgs) -> SamplingParams {
    let mut layers = s.command_line_layers();
    let greedy = SamplingLayer {
        temperature: Some(0.0),
        ..SamplingLayer::default()
    };
    layers.push((Source::Builtin, greedy));
    resolve(&layers, random_seed()).params
}

/// How `--json` names a turn's end.
fn finish_reason(end: TurnEnd) -> &'static str {
    match end {
        TurnEnd::EndOfTurn(_) | TurnEnd::StopString => "stop",
        TurnEnd::Length => "length",
        TurnEnd::ContextFull => "context_full",
        TurnEnd::Cancelled => "cancelled",
        TurnEnd::ToolCalls => "tool_calls",
    }
}

/// The prompt as given: ids as they are, or BOS and the text's ids.
fn prompt_ids(args: &GenerateArgs, lm: &LoadedModel) -> anyhow::Result<Vec<u32>> {
    let ids = match (&args.ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let tok = lm
                .tokenizer
                .as_ref()
                .context("this model directory has no tokenizer.json: pass the prompt as --ids")?;
            let mut ids = vec![lm.model.config().bos_token_id];
            ids.extend(tok.encode(text)?);
            ids
        }
        (None, None) => bail!("pass --prompt TEXT or --ids 2,818,…"),
    };
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    Ok(ids)
}

fn write_logits(
    path: &std::path::Path,
    logits: &[f32],
    rows: usize,
    vocab: usize,
) -> anyhow::Result<()> {
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, vocab], &bytes)
            .context("building the logits tensor")?;
    safetensors::serialize_to_file([("logits", view)], None, path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
