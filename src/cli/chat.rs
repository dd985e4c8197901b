//! Chat without the terminal UI: `gemma-chat --prompt TEXT` (one answer) and piped input (a
//! line-by-line chat on stdin/stdout). Both keep one warm session, so each turn prefills only its
//! own tokens, rendered with the checkpoint's chat template.

use std::io::{BufRead, Write};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use gemma_chat::engine::session::{Session, TurnStats};
use gemma_chat::generate::LoadedModel;
use gemma_chat::sampling::SamplingParams;
use gemma_chat::tokenizer::Tokenizer;
use gemma_chat::tokenizer::stream::TextStream;
use gemma_chat::tokenizer::template::Conversation;

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
            header: 0,
            warned: false,
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
        let c = Conversation {
            system: None,
            thinking: false,
            continues: !self.convo.is_empty(),
        };
        let (turn, failed) = self.lm.next_turn(&c, text)?;
        if let Some(e) = failed.filter(|_| !self.warned) {
            self.warned = true;
            eprintln!("warning: {e}; using the built-in chat layout");
        }
        let (mut next, header) = self.lm.prompt_ids(&self.convo, self.header, &turn)?;
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
        let (_, stats) = self.session.run_turn(
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
        self.convo = next;
        self.header = header.len();
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
