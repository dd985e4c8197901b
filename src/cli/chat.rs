//! Chat without the terminal UI: `gemma-chat --prompt TEXT` (one answer) and, until the UI
//! lands, `gemma-chat` alone (a line-by-line chat on stdin/stdout). Both keep one warm session,
//! so each turn prefills only its own tokens.

use std::io::{BufRead, Write};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use gemma_chat::engine::session::{Session, TurnStats};
use gemma_chat::generate::LoadedModel;
use gemma_chat::sampling::SamplingParams;
use gemma_chat::tokenizer::Tokenizer;
use gemma_chat::tokenizer::stream::TextStream;

use super::ModelArgs;
use super::generate::load_model;

/// Context limit of a chat, in tokens.
const CONTEXT: usize = 8192;

/// One conversation in token space over a warm session.
struct Chat<'a> {
    lm: &'a LoadedModel,
    tok: &'a Tokenizer,
    session: Session,
    /// The whole conversation; the session holds all of it but a final stop id.
    convo: Vec<u32>,
    stop_ids: Vec<u32>,
    limit: usize,
    turns: u64,
}

impl<'a> Chat<'a> {
    fn new(lm: &'a LoadedModel) -> anyhow::Result<Self> {
        let tok = lm
            .tokenizer
            .as_ref()
            .context("this model has no tokenizer, so it cannot chat; use `generate --ids`")?;
        Ok(Self {
            lm,
            tok,
            session: Session::new(&lm.model),
            convo: Vec::new(),
            stop_ids: lm.chat_stop_ids(),
            limit: CONTEXT.min(lm.model.config().max_position_embeddings),
            turns: 0,
        })
    }

    fn reset(&mut self) {
        self.session.reset();
        self.convo.clear();
    }

    /// Answers `text`, streaming the answer to stdout.
    fn turn(&mut self, text: &str, max_new: usize, temperature: f32) -> anyhow::Result<TurnStats> {
        let cfg = self.lm.model.config();
        let mut next = self.convo.clone();
        if next.is_empty() {
            next.push(cfg.bos_token_id);
        } else {
            next.extend(self.tok.encode("\n")?);
        }
        next.extend(self.tok.encode(&self.lm.user_turn(text)?)?);
        let needed = next.len() + max_new;
        if needed > self.limit {
            anyhow::bail!(
                "this turn needs {needed} tokens of context, the limit is {}; start a new \
                 conversation (/reset)",
                self.limit
            );
        }
        self.turns += 1;
        let sampling = SamplingParams {
            temperature,
            seed: self.turns,
            ..Default::default()
        };
        let mut stream = TextStream::new();
        let mut answer = Vec::new();
        let stdout = std::io::stdout();
        let tok = self.tok;
        let mut on_token = |id: u32| {
            answer.push(id);
            if let Ok(delta) = stream.push(tok, id) {
                let mut out = stdout.lock();
                let _ = out.write_all(delta.as_bytes());
                let _ = out.flush();
            }
        };
        let never = AtomicBool::new(false);
        let (end, stats) = self.session.run_turn(
            &self.lm.model,
            &next,
            &sampling,
            max_new,
            &self.stop_ids,
            256,
            &never,
            &mut on_token,
        )?;
        println!("{}", stream.finish(tok)?);
        next.extend(&answer);
        next.extend(end.closing_ids(tok, cfg.family)?);
        self.convo = next;
        Ok(stats)
    }
}

/// `gemma-chat --prompt TEXT`: one user turn, the answer streamed to stdout.
pub fn once(
    common: &ModelArgs,
    prompt: &str,
    max_new: usize,
    temperature: f32,
) -> anyhow::Result<()> {
    let (lm, _) = load_model(common)?;
    Chat::new(&lm)?.turn(prompt, max_new, temperature)?;
    Ok(())
}

/// Runs the interactive chat until EOF or `/quit`.
pub fn run(common: &ModelArgs, max_new: usize, temperature: f32) -> anyhow::Result<()> {
    let (lm, _) = load_model(common)?;
    let mut chat = Chat::new(&lm)?;
    let cfg = lm.model.config();
    eprintln!(
        "gemma-chat: {} ({} layers) from {}. Type a message; /reset starts over, /quit or \
         Ctrl+D leaves.",
        cfg.model_type,
        cfg.num_layers(),
        lm.path.display()
    );
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.context("reading stdin")?;
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                chat.reset();
                eprintln!("(new conversation)\n");
            }
            text => match chat.turn(text, max_new, temperature) {
                Ok(stats) => eprintln!(
                    "[{} · reused {} · prefilled {} at {:.0} tok/s · {} tokens at {:.1} tok/s · \
                     context {}/{}]\n",
                    stats.reuse.as_str(),
                    stats.reused_tokens,
                    stats.prefilled_tokens,
                    stats.prefill_tok_s,
                    stats.generated_tokens,
                    stats.decode_tok_s,
                    chat.convo.len(),
                    chat.limit,
                ),
                Err(e) => eprintln!("error: {e:#}\n"),
            },
        }
    }
    Ok(())
}
