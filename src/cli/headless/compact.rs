//! A headless conversation that outgrows its context: the engine's compaction (or slide) said
//! on stderr as the TUI marks it in the transcript, and `/compact` in piped chat.

use anyhow::{Context, bail};

use super::printable;
use super::{Headless, SILENCE};
use gemma_engine::protocol::{Command, Compaction, Event, OverflowMode};

fn exchanges(n: usize) -> String {
    match n {
        1 => "1 exchange".into(),
        n => format!("{n} exchanges"),
    }
}

/// One line for stderr about a compaction.
pub fn describe(r: &Compaction) -> String {
    let sizes = format!("{} -> {} tokens", r.before, r.after);
    match r.mode {
        OverflowMode::Slide => format!(
            "context slid: the oldest {} left out ({sizes})",
            exchanges(r.dropped)
        ),
        _ => format!(
            "context compacted: {} summarized{} ({sizes}; the summary's turn reused {} tokens \
             and prefilled {})",
            exchanges(r.summarized),
            match r.dropped {
                0 => String::new(),
                n => format!(", {} before them left out", exchanges(n)),
            },
            r.reused,
            r.prefilled
        ),
    }
}

impl Headless {
    /// Says a compaction on stderr and keeps the conversation's size.
    pub(super) fn compacted(&mut self, r: &Compaction) {
        errln!("note: {}", printable(&describe(r), false));
        self.context.0 = r.after;
    }

    /// `/compact`: the engine summarizes the older exchanges now.
    pub fn compact(&mut self) -> anyhow::Result<()> {
        self.engine.send(Command::Compact { tab: self.tab });
        loop {
            let event = self
                .engine
                .events
                .recv_timeout(SILENCE)
                .context("the engine stopped answering")?;
            match event {
                Event::Compacted { tab, report } if tab == self.tab => {
                    self.compacted(&report);
                    return Ok(());
                }
                Event::Notice { tab, text } if tab == self.tab => {
                    errln!("note: {}", printable(&text, false))
                }
                Event::Failed { tab, error } if tab == self.tab => {
                    bail!("{}", printable(&error, false))
                }
                Event::EngineStopped { error } => bail!("{}", printable(&error, false)),
                _ => {}
            }
        }
    }
}
