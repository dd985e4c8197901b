//! `gemma-chat` without a subcommand, until the terminal UI lands: a line-by-line chat on
//! stdin/stdout that keeps one warm session, so each turn prefills only its own tokens.

use std::io::{BufRead, Write};

use anyhow::Context;
use gemma_chat::generate::{Finish, GenerateOptions, generate};
use gemma_chat::model::config::Family;
use gemma_chat::sampling::SamplingParams;
use gemma_chat::tokenizer::stream::TextStream;

use super::ModelArgs;
use super::generate::load_model;

/// Context limit of the interactive chat, in tokens.
const CONTEXT: usize = 8192;

/// Runs the interactive chat until EOF or `/quit`.
pub fn run(common: &ModelArgs, max_new_tokens: usize, temperature: f32) -> anyhow::Result<()> {
    let lm = load_model(common)?;
    let tok = lm
        .tokenizer
        .as_ref()
        .context("this model has no tokenizer, so it cannot chat; use `generate --ids`")?;
    let cfg = lm.model.config();
    let limit = CONTEXT.min(cfg.max_position_embeddings);
    let (open, close) = match cfg.family {
        Family::Gemma4 => ("<|turn>", "<turn|>"),
        Family::Gemma3 => ("<start_of_turn>", "<end_of_turn>"),
    };
    eprintln!(
        "gemma-chat: {} ({} layers) from {}. Type a message; /reset starts over, /quit or \
         Ctrl+D leaves.",
        cfg.model_type,
        cfg.num_layers(),
        lm.path.display()
    );
    let mut cache = lm.model.new_cache();
    // Ids the session still has to feed before the next user turn: the last sampled token,
    // which ended the turn or was never fed back.
    let mut pending: Vec<u32> = Vec::new();
    let mut turn = 0u64;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("\n> ");
        let Some(line) = lines.next() else { break };
        let line = line.context("reading stdin")?;
        let text = line.trim();
        match text {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                cache.clear();
                pending.clear();
                eprintln!("(new conversation)");
                continue;
            }
            _ => {}
        }
        let mut ids = Vec::new();
        if cache.is_empty() {
            ids.push(cfg.bos_token_id);
        } else {
            ids.append(&mut pending);
            ids.extend(tok.encode("\n")?);
        }
        let mut turn_text = format!("{open}user\n{text}{close}\n{open}model\n");
        if cfg.family == Family::Gemma4 {
            turn_text.push_str("<|channel>thought\n<channel|>");
        }
        ids.extend(tok.encode(&turn_text)?);
        let needed = cache.len() + ids.len() + max_new_tokens;
        if needed > limit {
            eprintln!(
                "error: this turn needs {needed} tokens of context, the limit is {limit}; \
                 type /reset to start a new conversation"
            );
            continue;
        }
        let reused = cache.len();
        let prefilled = ids.len();
        turn += 1;
        let opts = GenerateOptions {
            max_new_tokens,
            sampling: SamplingParams {
                temperature,
                seed: turn,
                ..Default::default()
            },
            chunk: 256,
            prompt_logits: false,
            stop_ids: lm.chat_stop_ids(),
        };
        let mut stream = TextStream::new();
        let stdout = std::io::stdout();
        let mut on_token = |id: u32| {
            if let Ok(delta) = stream.push(tok, id) {
                let mut out = stdout.lock();
                let _ = out.write_all(delta.as_bytes());
                let _ = out.flush();
            }
            true
        };
        let out = generate(&lm.model, &mut cache, &ids, &opts, &mut on_token)?;
        println!("{}", stream.finish(tok)?);
        if let Some(&last) = out.generated.last() {
            pending.push(last);
        }
        if out.finish != Finish::Stop {
            // The answer was cut: close the model's turn so the history stays well-formed.
            pending.extend(tok.encode(close)?);
        }
        let n = out.generated.len();
        eprintln!(
            "[reused {reused} · prefilled {prefilled} at {:.0} tok/s · {n} tokens at {:.1} tok/s · \
             context {}/{limit}]",
            prefilled as f64 / out.prefill_s.max(1e-9),
            n.saturating_sub(1) as f64 / out.decode_s.max(1e-9),
            cache.len() + pending.len(),
        );
    }
    Ok(())
}
