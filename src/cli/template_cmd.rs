//! `gemma-chat template render`: exactly what a chat template renders for a conversation, so
//! that users bringing their own checkpoint see what the model is fed.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gemma_model::checkpoint::chat_format_of;
use gemma_model::tokenizer::template::{ChatTemplate, MAX_SOURCE, TemplateSource};

use super::ModelArgs;

/// `gemma-chat template …`.
#[derive(Debug, Args)]
pub struct TemplateArgs {
    #[command(subcommand)]
    command: TemplateCommand,
}

#[derive(Debug, Subcommand)]
enum TemplateCommand {
    /// Print what the chat template renders for a conversation, with the generation prompt
    /// (BOS included, no newline added); control characters but newline and tab are left out
    /// unless `--raw`, which prints it byte for byte.
    Render(RenderArgs),
}

#[derive(Debug, Args)]
struct RenderArgs {
    /// A Jinja template file; without it, the template of `--model` (or the configured model).
    #[arg(long)]
    template: Option<PathBuf>,
    /// The conversation: a JSON list of messages (`[{"role": "user", "content": "Hi"}]`).
    #[arg(long)]
    messages: PathBuf,
    /// `enable_thinking`: set from the global `--thinking`, not a flag of its own.
    #[arg(skip)]
    thinking: bool,
    /// Leave out the generation prompt (the opening of the model's turn).
    #[arg(long)]
    no_generation_prompt: bool,
    /// The BOS text `--template` renders (a model's own comes from its tokenizer).
    #[arg(long, default_value = "<bos>")]
    bos: String,
    /// The EOS text `--template` renders.
    #[arg(long, default_value = "<eos>")]
    eos: String,
}

/// Runs `template`.
/// Renders as `args` say; `thinking`: `enable_thinking` (the global `--thinking [LEVEL]`, on at
/// any level but off), else false, as gemma-chat renders turns.
pub fn run(
    args: TemplateArgs,
    common: &ModelArgs,
    thinking: bool,
    raw: bool,
) -> anyhow::Result<()> {
    let TemplateCommand::Render(mut args) = args.command;
    args.thinking = thinking;
    let text = super::read_text(&args.messages, 16 << 20)?;
    let messages: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", args.messages.display()))?;
    if !messages.is_array() {
        bail!(
            "{} must hold a JSON list of messages, e.g. [{{\"role\": \"user\", \"content\": \"Hi\"}}]",
            args.messages.display()
        );
    }
    let rendered = match &args.template {
        Some(path) => {
            let source = TemplateSource {
                // A file larger than a chat template may be is refused unread.
                text: super::read_text(path, MAX_SOURCE as u64)?,
                origin: path.display().to_string(),
            };
            let t = ChatTemplate::new(&source, &args.bos, &args.eos)?;
            render(&t, &messages, &args)?
        }
        None => {
            let choice = common.choice(&common.config()?)?;
            let path = match choice.model {
                Some(p) => p,
                None => gemma_model::demo::ensure(&mut gemma_model::demo::print_progress())
                    .context("no model given, and the demo model could not be fetched")?,
            };
            let format =
                chat_format_of(&path).with_context(|| format!("reading {}", path.display()))?;
            match format.own() {
                Some(t) => render(t.as_ref().map_err(Clone::clone)?, &messages, &args)?,
                None => {
                    errln!(
                        "{} ships no chat template: this is gemma-chat's {}",
                        path.display(),
                        format.builtin().origin()
                    );
                    render(format.builtin(), &messages, &args)?
                }
            }
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(super::printable(&rendered, raw).as_bytes())?;
    out.flush()?;
    Ok(())
}

fn render(
    t: &ChatTemplate,
    messages: &serde_json::Value,
    args: &RenderArgs,
) -> anyhow::Result<String> {
    Ok(t.render(
        messages,
        !args.no_generation_prompt,
        Some(args.thinking),
        None,
    )?)
}
