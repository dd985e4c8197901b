//! `--prompt` and piped chat through the remote engine: the same protocol the UI speaks (one tab,
//! its turns submitted, answer text printed as it streams, the server's stats on stderr), so a
//! script can use a model server as it uses the in-process model.

use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::Context;
use gemma_chat::engine::protocol::{Command, Event, TurnStats};
use gemma_chat::engine::{EngineHandle, RemoteOptions, spawn_remote};
use gemma_chat::sampling::SamplingParams;

const TAB: u64 = 1;

/// The engine on the server, ready, with the tab set up; stages go to stderr.
fn connect(
    options: RemoteOptions,
    max_new: usize,
    temperature: f32,
) -> anyhow::Result<EngineHandle> {
    let h = spawn_remote(options);
    loop {
        match h.events.recv().context("the remote engine stopped")? {
            Event::Loading { stage, .. } => eprintln!("{}", super::printable(&stage, false)),
            Event::Ready { model, .. } => {
                eprintln!("gemma-chat: {model}");
                break;
            }
            Event::LoadFailed { error } | Event::EngineStopped { error } => {
                anyhow::bail!("{error}")
            }
            _ => {}
        }
    }
    h.send(Command::SetSampling {
        tab: TAB,
        sampling: SamplingParams {
            temperature,
            ..SamplingParams::default()
        },
        max_new_tokens: max_new,
        stop: Vec::new(),
    });
    Ok(h)
}

/// One turn: the answer printed as it comes; its stats, or why it failed.
fn turn(h: &EngineHandle, text: &str, raw: bool) -> anyhow::Result<TurnStats> {
    h.send(Command::Submit {
        tab: TAB,
        text: text.to_string(),
    });
    let mut out = std::io::stdout();
    loop {
        let event = h
            .events
            .recv_timeout(Duration::from_secs(3600))
            .context("the remote engine stopped")?;
        match event {
            Event::Token { text, .. } => {
                write!(out, "{}", super::printable(&text, raw))?;
                out.flush()?;
            }
            Event::Finished { stats, .. } => {
                writeln!(out)?;
                return Ok(stats);
            }
            Event::Failed { error, .. } | Event::EngineStopped { error } => {
                writeln!(out)?;
                anyhow::bail!("{}", super::printable(&error, false));
            }
            _ => {}
        }
    }
}

fn say(stats: &TurnStats) {
    eprintln!(
        "[{} · reused {} · prefilled {} · {} tokens at {:.1} tok/s (the server's numbers)]",
        stats.reuse.as_str(),
        stats.reused_tokens,
        stats.prefilled_tokens,
        stats.generated_tokens,
        stats.decode_tok_s
    );
}

/// `--prompt TEXT` on the server.
pub fn once(
    options: RemoteOptions,
    prompt: &str,
    max_new: usize,
    temperature: f32,
    raw: bool,
) -> anyhow::Result<()> {
    let h = connect(options, max_new, temperature)?;
    say(&turn(&h, prompt, raw)?);
    Ok(())
}

/// The piped line chat on the server, until EOF or `/quit`.
pub fn run(
    options: RemoteOptions,
    max_new: usize,
    temperature: f32,
    raw: bool,
) -> anyhow::Result<()> {
    let h = connect(options, max_new, temperature)?;
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading stdin")?;
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            text => match turn(&h, text, raw) {
                Ok(stats) => say(&stats),
                Err(e) => eprintln!("error: {e:#}"),
            },
        }
    }
    Ok(())
}
