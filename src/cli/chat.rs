//! `gemma-chat` without a subcommand, until the terminal UI lands: a line-by-line chat on
//! stdin/stdout that keeps one warm session, so each turn prefills only its own tokens.

use std::io::{BufRead, Write};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use gemma_chat::engine::session::{Session, TurnEnd};
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
    let mut session = Session::new(&lm.model);
    // The conversation in token space; the session holds all of it but a final stop id.
    let mut convo: Vec<u32> = Vec::new();
    let stop_ids = lm.chat_stop_ids();
    let never = AtomicBool::new(false);
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
                session.reset();
                convo.clear();
                eprintln!("(new conversation)");
                continue;
            }
            _ => {}
        }
        let mut next = convo.clone();
        if next.is_empty() {
            next.push(cfg.bos_token_id);
        } else {
            next.extend(tok.encode("\n")?);
        }
        let mut turn_text = format!("{open}user\n{text}{close}\n{open}model\n");
        if cfg.family == Family::Gemma4 {
            turn_text.push_str("<|channel>thought\n<channel|>");
        }
        next.extend(tok.encode(&turn_text)?);
        let needed = next.len() + max_new_tokens;
        if needed > limit {
            eprintln!(
                "error: this turn needs {needed} tokens of context, the limit is {limit}; \
                 type /reset to start a new conversation"
            );
            continue;
        }
        turn += 1;
        let sampling = SamplingParams {
            temperature,
            seed: turn,
            ..Default::default()
        };
        let mut stream = TextStream::new();
        let mut answer = Vec::new();
        let stdout = std::io::stdout();
        let mut on_token = |id: u32| {
            answer.push(id);
            if let Ok(delta) = stream.push(tok, id) {
                let mut out = stdout.lock();
                let _ = out.write_all(delta.as_bytes());
                let _ = out.flush();
            }
        };
        let (end, stats) = session.run_turn(
            &lm.model,
            &next,
            &sampling,
            max_new_tokens,
            &stop_ids,
            256,
            &never,
            &mut on_token,
        )?;
        println!("{}", stream.finish(tok)?);
        next.extend(&answer);
        match end {
            TurnEnd::Stop(id) => next.push(id),
            // The answer was cut: close the model's turn so the history stays well-formed.
            TurnEnd::Length | TurnEnd::Stopped => next.extend(tok.encode(close)?),
        }
        convo = next;
        eprintln!(
            "[{} · reused {} · prefilled {} at {:.0} tok/s · {} tokens at {:.1} tok/s · \
             context {}/{limit}]",
            stats.reuse.as_str(),
            stats.reused_tokens,
            stats.prefilled_tokens,
            stats.prefill_tok_s,
            stats.generated_tokens,
            stats.decode_tok_s,
            convo.len(),
        );
    }
    Ok(())
}
