//! Chat without the terminal UI: `gemma-chat --prompt TEXT` (one answer) and piped input (a
//! line-by-line chat on stdin/stdout). Both keep one warm session, so each turn prefills only its
//! own tokens, rendered with the checkpoint's chat template.

use std::io::{BufRead, Write};

use anyhow::Context;
use gemma_chat::engine::protocol::TurnStats;
use gemma_chat::engine::reply::{Piece, Reply};
use gemma_chat::engine::session::Session;
use gemma_chat::engine::thinking::Channels;
use gemma_chat::engine::turn::{Turn, TurnOptions};
use gemma_chat::load::LoadedModel;
use gemma_chat::sampling::SamplingParams;
use gemma_chat::tokenizer::Tokenizer;

use super::ModelArgs;
use super::generate::load_model;

/// Context limit of a chat, in tokens.
const CONTEXT: usize = 8192;

/// One conversation in token space over a warm session.
struct Chat<'a> {
    lm: &'a LoadedModel,
    tok: &'a Tokenizer,
    session: Session,
    /// The whole conversation up to the end of the last answer, all resident.
    convo: Vec<u32>,
    /// Its header's length after BOS.
    header: usize,
    /// The chat template's error was shown.
    warned: bool,
    end_ids: Vec<u32>,
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
            header: 0,
            warned: false,
            end_ids: lm.chat_end_ids(),
            limit: CONTEXT.min(lm.model.config().max_position_embeddings),
            turns: 0,
        })
    }

    fn reset(&mut self) {
        self.session.reset();
        self.convo.clear();
    }

    /// Answers `text`, streaming the answer to stdout.
    fn turn(
        &mut self,
        text: &str,
        max_new: usize,
        temperature: f32,
        raw: bool,
    ) -> anyhow::Result<TurnStats> {
        let next = self
            .lm
            .user_turn(&self.convo, self.header, None, false, text)?;
        if let Some(e) = next.template_error.filter(|_| !self.warned) {
            self.warned = true;
            eprintln!(
                "warning: {}; using the built-in chat layout",
                super::printable(&e.to_string(), false)
            );
        }
        self.turns += 1;
        let opts = TurnOptions {
            sampling: SamplingParams {
                temperature,
                seed: self.turns,
                ..Default::default()
            },
            max_new_tokens: max_new,
            end_ids: self.end_ids.clone(),
            context: self.limit,
            chunk: 256,
            boundary_snapshot: true,
            prompt_logits: false,
        };
        let mut turn = Turn::start(&mut self.session, next.prompt, opts)
            .map_err(|e| anyhow::anyhow!("{e}; start a new conversation (/reset)"))?;
        let channels = Channels::of(self.tok).filter(|_| self.lm.supports_thinking());
        let mut reply = Reply::new(channels, Vec::new());
        let (tok, stdout) = (self.tok, std::io::stdout());
        let show = |piece: Option<Piece>| {
            // The answer only (thinking is off here; a stray thought is not the answer).
            if let Some(Piece::Answer(t)) = piece {
                let mut out = stdout.lock();
                let _ = out.write_all(super::printable(&t, raw).as_bytes());
                let _ = out.flush();
            }
        };
        turn.run(&self.lm.model, &mut self.session, &mut |id| {
            reply.push(tok, id).map(|(p, _)| show(p)).is_ok()
        })?;
        show(reply.finish(tok)?);
        println!();
        self.convo = [turn.prompt(), turn.answer()].concat();
        self.header = next.header.len();
        Ok(turn.stats())
    }
}

/// `gemma-chat --prompt TEXT`: one user turn, the answer streamed to stdout.
pub fn once(
    common: &ModelArgs,
    prompt: &str,
    max_new: usize,
    temperature: f32,
    raw: bool,
) -> anyhow::Result<()> {
    let (lm, _) = load_model(common)?;
    Chat::new(&lm)?.turn(prompt, max_new, temperature, raw)?;
    Ok(())
}

/// Runs the interactive chat until EOF or `/quit`.
pub fn run(common: &ModelArgs, max_new: usize, temperature: f32, raw: bool) -> anyhow::Result<()> {
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
            text => match chat.turn(text, max_new, temperature, raw) {
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
                Err(e) => eprintln!("error: {}\n", super::printable(&format!("{e:#}"), false)),
            },
        }
    }
    Ok(())
}
