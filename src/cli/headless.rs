//! Chat without the terminal UI — `--prompt TEXT` (one answer), piped chat (a line-by-line chat on
//! stdin/stdout) and `generate --chat` — through the engine protocol with one tab, as the UI
//! drives it: the local engine or a server's alike, sampling resolved by the UI's resolver (tab
//! preset > flag > env > file > the model's defaults > Gemma's), a random seed unless one is set,
//! the config's stop strings, context length, thinking, presets, a system prompt and the tools
//! (`--tool-choice`, `--yes`). Answer text goes to stdout as it streams; stages, notices, tool
//! calls and each turn's numbers to stderr.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use gemma_app::app::{TabChoices, TurnSettings};
use gemma_app::config::Config;
use gemma_engine::protocol::{Attachment, Command, Event, TabId, TurnEnd, TurnStats};
use gemma_engine::{EngineHandle, RemoteOptions};

use super::front::{engine_options, spawn_engine, turn_settings, wait_ready};
use super::tools::{ToolConsole, Tools, tools_for};
use super::{ModelArgs, SamplingArgs, printable};

/// How long a turn may go without any event before the run gives up on the engine.
mod compact;
mod tab_args;

pub use self::tab_args::TabArgs;

const SILENCE: Duration = Duration::from_secs(3600);

/// How a finished turn went.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The answer's text as it came (before the terminal filter).
    pub text: String,
    /// Why it ended.
    pub end: TurnEnd,
    /// What it cost.
    pub stats: TurnStats,
}

/// One conversation through the engine protocol.
pub struct Headless {
    engine: EngineHandle,
    tab: TabId,
    settings: TurnSettings,
    /// The tab's own settings over the app's (its preset's, its flags').
    choices: TabChoices,
    system: Option<String>,
    /// The model has a thinking mode.
    can_think: bool,
    /// Tokens in the conversation, and the tab's limit.
    context: (usize, usize),
    remote: bool,
    /// Print the answer as it streams (else only collect it).
    pub echo: bool,
    raw: bool,
    /// The tools the engine runs, when the config names any.
    tools: Option<Tools>,
    /// Approvals and what is said of calls.
    console: ToolConsole,
}

impl Headless {
    /// Starts the engine the config and flags name, waits until it is ready (stages on stderr),
    /// and sets up the tab. `max_new` is the command's own answer length, if it has one.
    pub fn open(
        common: &ModelArgs,
        sampling: &SamplingArgs,
        tab: &TabArgs,
        max_new: Option<usize>,
        raw: bool,
    ) -> anyhow::Result<Self> {
        let config = common.config()?;
        // A headless run waits for a server that is down only so long: nobody is there to quit.
        let remote = common.remote(&config)?.map(|r| RemoteOptions {
            give_up_after: Some(r.idle_timeout),
            ..r
        });
        let settings = turn_settings(&config, sampling, max_new);
        let choice = common.choice(&config)?;
        let is_remote = remote.is_some();
        let preset_name = preset_name(&config, tab);
        let (tools, tool_choice) = tools_for(&config, tab.tool_choice, preset_name.as_deref())?;
        let mut choices = TabChoices::new(&settings, tool_choice);
        let mut system = tab.system.clone();
        if let Some(name) = &preset_name {
            let p = config.preset(name).map_err(anyhow::Error::msg)?;
            choices.take_preset(p, true);
            // The flag's tool choice wins over the preset's.
            choices.tool_choice = tool_choice;
            system = system.or_else(|| p.system.clone());
        }
        if let Some(level) = tab.thinking {
            choices.thinking = level;
        }
        let mut options = engine_options(&config, None);
        options.tools = tools.as_ref().map(Tools::shared);
        let engine = spawn_engine(choice, remote, options);
        let mut me = Self {
            engine,
            tab: 1,
            settings,
            choices,
            system,
            can_think: false,
            context: (0, config.model.context_length),
            remote: is_remote,
            echo: true,
            raw,
            tools,
            console: ToolConsole::new(tab.yes),
        };
        me.wait_ready()?;
        if let Some(tools) = &me.tools {
            tools.wait_and_warn(&mut me.console);
        }
        me.set_up();
        Ok(me)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let ready = wait_ready(&self.engine)?;
        errln!("gemma-chat: {}", printable(&ready.model, false));
        self.context.1 = ready.context_length;
        self.can_think = ready.thinking;
        self.settings.model = ready.generation;
        Ok(())
    }

    /// The tab's settings, resolved as the UI resolves a tab's.
    fn set_up(&self) {
        let system = self.system.as_deref();
        let settings = (self.settings).tab_settings(&self.choices, system, self.can_think);
        self.engine.send(Command::Configure {
            tab: self.tab,
            settings: Box::new(settings),
        });
    }

    /// Starts a new conversation (the old tab is closed, its session freed).
    pub fn reset(&mut self) {
        self.engine.send(Command::CloseTab { tab: self.tab });
        self.tab += 1;
        self.context.0 = 0;
        self.set_up();
    }

    /// Answers `text`, streaming the answer to stdout when `echo`.
    pub fn turn(&mut self, text: &str) -> anyhow::Result<Answer> {
        self.turn_with(text, Vec::new())
    }

    /// Answers `text` shown after `images`.
    pub fn turn_with(&mut self, text: &str, images: Vec<Attachment>) -> anyhow::Result<Answer> {
        self.engine.send(Command::Submit {
            tab: self.tab,
            text: text.to_string(),
            images,
        });
        let mut out = std::io::stdout();
        let mut answer = String::new();
        loop {
            let event = self
                .engine
                .events
                .recv_timeout(SILENCE)
                .context("the engine stopped answering")?;
            // Calls and their results, each server's error: on stderr; a call's approval sent.
            if let Some(reply) = self.console.on_event(self.tab, &event) {
                self.engine.send(reply);
            }
            match event {
                Event::Token { tab, text } if tab == self.tab => {
                    if self.echo {
                        out.write_all(printable(&text, self.raw).as_bytes())?;
                        out.flush()?;
                    }
                    answer.push_str(&text);
                }
                Event::Committed { tab, tokens } if tab == self.tab => self.context.0 = tokens,
                Event::Compacted { tab, report } if tab == self.tab => self.compacted(&report),
                Event::TemplateFallback { tab, error } if tab == self.tab => errln!(
                    "warning: {}; using the built-in chat layout",
                    printable(&error, false)
                ),
                Event::Notice { tab, text } if tab == self.tab => {
                    errln!("note: {}", printable(&text, false))
                }
                Event::Finished { tab, end, stats } if tab == self.tab => {
                    if self.echo {
                        writeln!(out)?;
                    }
                    if end == TurnEnd::ContextFull {
                        errln!(
                            "the context is full ({} tokens): start a new conversation (/reset)",
                            self.context.1
                        );
                    }
                    return Ok(Answer {
                        text: answer,
                        end,
                        stats,
                    });
                }
                Event::Failed { tab, error } if tab == self.tab => {
                    if self.echo && !answer.is_empty() {
                        writeln!(out)?;
                    }
                    bail!("{}", printable(&error, false));
                }
                Event::EngineStopped { error } => bail!("{}", printable(&error, false)),
                _ => {}
            }
        }
    }

    /// A turn's numbers as one line for stderr.
    pub fn describe(&self, s: &TurnStats) -> String {
        format!(
            "[{} · reused {} · prefilled {} at {:.0} tok/s · {} tokens at {:.1} tok/s{}{} · \
             context {}/{}{}]",
            s.reuse.as_str(),
            s.reused_tokens,
            s.prefilled_tokens,
            s.prefill_tok_s,
            s.generated_tokens,
            s.decode_tok_s,
            match s.thought_tokens {
                0 => String::new(),
                n => format!(" · {n} thought"),
            },
            super::tools::describe_stats(s),
            self.context.0,
            self.context.1,
            if self.remote {
                " · the server's numbers"
            } else {
                ""
            }
        )
    }
}

/// The preset the tab takes (`--preset`, else `ui.default_preset`): its sampling layer, answer
/// length, thinking and system prompt.
/// The name of the preset the tab takes: `--preset`, else `ui.default_preset`.
fn preset_name(config: &Config, tab: &TabArgs) -> Option<String> {
    tab.preset
        .clone()
        .or_else(|| Some(config.ui.default_preset.clone()).filter(|p| !p.is_empty()))
}

/// `gemma-chat --prompt TEXT`: one turn, the answer on stdout, its numbers on stderr.
pub fn once(
    common: &ModelArgs,
    sampling: &SamplingArgs,
    tab: &TabArgs,
    max_new: Option<usize>,
    (prompt, images): (&str, Vec<Attachment>),
    raw: bool,
) -> anyhow::Result<()> {
    let mut chat = Headless::open(common, sampling, tab, max_new, raw)?;
    let answer = chat.turn_with(prompt, images)?;
    errln!("{}", chat.describe(&answer.stats));
    Ok(())
}

/// Piped chat: a turn per line of stdin until EOF or `/quit`; `/reset` starts over, `/compact`
/// summarizes the older exchanges.
pub fn lines(
    common: &ModelArgs,
    sampling: &SamplingArgs,
    tab: &TabArgs,
    max_new: Option<usize>,
    raw: bool,
) -> anyhow::Result<()> {
    let mut chat = Headless::open(common, sampling, tab, max_new, raw)?;
    errln!("Type a message; /reset starts over, /compact summarizes, /quit or Ctrl+D leaves.");
    // Every turn goes on after a failed one, and the exit status says that some failed.
    let mut failed = 0usize;
    for line in std::io::stdin().lines() {
        let line = line.context("reading stdin")?;
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                chat.reset();
                errln!("(new conversation)\n");
            }
            "/compact" => {
                if let Err(e) = chat.compact() {
                    failed += 1;
                    errln!("error: {}\n", printable(&format!("{e:#}"), false));
                }
            }
            text => match chat.turn(text) {
                Ok(a) => errln!("{}\n", chat.describe(&a.stats)),
                Err(e) => {
                    failed += 1;
                    errln!("error: {}\n", printable(&format!("{e:#}"), false));
                }
            },
        }
    }
    if failed > 0 {
        anyhow::bail!(
            "{failed} of the piped turns failed (each said why above); the others were answered"
        );
    }
    Ok(())
}
