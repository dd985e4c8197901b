//! `gemma-chat generate` (headless, scriptable) and `gemma-chat --prompt` (one streamed answer).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use gemma_chat::generate::{GenerateOptions, LoadedModel, generate, load};
use gemma_chat::sampling::SamplingParams;
use gemma_chat::tokenizer::stream::TextStream;
use gemma_chat::{backend, demo, model::ComputeDtype};
use serde_json::json;

use super::{ModelArgs, SamplingArgs};

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
    /// Wrap --prompt in the model's chat layout (one user turn, then the model's turn).
    #[arg(long, requires = "prompt")]
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
}

/// Loads the chosen model, or the demo model (fetched on first use) when none is named.
pub fn load_model(common: &ModelArgs) -> anyhow::Result<(LoadedModel, ComputeDtype)> {
    let choice = common.choice(&common.config()?)?;
    let device = backend::device(&choice.backend)?;
    let path = match &choice.model {
        Some(path) => path.clone(),
        None => demo::ensure(&mut |line| eprintln!("{line}"))
            .context("no model given, and the demo model could not be fetched")?,
    };
    let dtype = choice.dtype_on(&device);
    let lm = load(&path, &device, dtype, &mut |_, _| {})
        .with_context(|| format!("loading {}", path.display()))?;
    Ok((lm, dtype))
}

/// Runs `generate`.
/// Sampling is greedy unless `--temperature` (or its variable) says otherwise: scripts get
/// reproducible output by default.
pub fn run(args: GenerateArgs, common: &ModelArgs, s: &SamplingArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let (lm, dtype) = load_model(common)?;
    let load_s = t0.elapsed().as_secs_f64();
    let cfg = lm.model.config();
    let prompt_ids = match (&args.ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let tok = lm
                .tokenizer
                .as_ref()
                .context("this model directory has no tokenizer.json: pass the prompt as --ids")?;
            if args.chat {
                lm.single_turn_ids(text)?
            } else {
                let mut ids = vec![cfg.bos_token_id];
                ids.extend(tok.encode(text)?);
                ids
            }
        }
        (None, None) => bail!("pass --prompt TEXT or --ids 2,818,…"),
    };
    if prompt_ids.is_empty() {
        bail!("the prompt is empty");
    }
    let opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling: SamplingParams {
            temperature: s.temperature.unwrap_or(0.0),
            top_k: s.top_k.unwrap_or(64),
            top_p: s.top_p.unwrap_or(0.95),
            min_p: s.min_p.unwrap_or(0.0),
            seed: s.seed.unwrap_or(0),
        },
        chunk: args.chunk,
        prompt_logits: args.dump_logits.is_some(),
        // Raw prompts stop where transformers would; a chat turn also ends at end-of-turn.
        stop_ids: if args.chat {
            lm.chat_stop_ids()
        } else {
            lm.stop_ids.clone()
        },
    };
    let limit = cfg.max_position_embeddings;
    if prompt_ids.len() + args.max_new_tokens > limit {
        // Scripts compare against the reference, which runs past it too; chats refuse instead.
        eprintln!(
            "warning: {} prompt + {} new tokens exceed the model's trained context of {limit}",
            prompt_ids.len(),
            args.max_new_tokens
        );
    }
    let mut cache = lm.model.new_cache();
    let mut stream = TextStream::new();
    let mut text = String::new();
    let stdout = std::io::stdout();
    let mut on_token = |id: u32| {
        if let Some(tok) = &lm.tokenizer
            && let Ok(delta) = stream.push(tok, id)
        {
            if !args.json {
                let mut out = stdout.lock();
                let _ = out.write_all(delta.as_bytes());
                let _ = out.flush();
            }
            text.push_str(&delta);
        }
        true
    };
    let out = generate(&lm.model, &mut cache, &prompt_ids, &opts, &mut on_token)?;
    if let Some(tok) = &lm.tokenizer {
        let rest = stream.finish(tok)?;
        if !args.json {
            print!("{rest}");
        }
        text.push_str(&rest);
    }
    if let (Some(path), Some(logits)) = (&args.dump_logits, &out.prompt_logits) {
        write_logits(path, logits, prompt_ids.len(), cfg.vocab_size)?;
    }
    let n_dec = out.generated.len().saturating_sub(1);
    if args.json {
        let obj = json!({
            "prompt_ids": prompt_ids,
            "generated_ids": out.generated,
            "text": text,
            "finish_reason": out.finish.as_str(),
            "timings": {
                "load_s": load_s,
                "prefill_s": out.prefill_s,
                "decode_s": out.decode_s,
                "prefill_tok_s": prompt_ids.len() as f64 / out.prefill_s.max(1e-9),
                "decode_tok_s": n_dec as f64 / out.decode_s.max(1e-9),
            },
            "dtype": dtype.as_str(),
        });
        println!("{obj}");
    } else {
        println!();
    }
    Ok(())
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
