//! A headless run's tab settings from the command line ([`TabArgs`]): its preset, system prompt,
//! thinking level, tool choice, attachments, and whether tool calls are approved.

use anyhow::bail;
use clap::Args;
use gemma_app::config::{Config, Thinking};
use gemma_engine::protocol::ToolChoice;

/// A tab's own settings, as the TUI gives them: a preset, a system prompt, its tool choice;
/// and whether a headless run approves tool calls.
#[derive(Debug, Args, Clone, Default)]
pub struct TabArgs {
    /// The tab's preset, a `[presets.NAME]` from the config (default: `ui.default_preset`).
    #[arg(long, global = true)]
    pub preset: Option<String>,
    /// The tab's system prompt (over the preset's).
    #[arg(long, global = true)]
    pub system: Option<String>,
    /// Whether the model may, must or must not call the configured tools (`[mcp.servers]`,
    /// `[tools]`): auto, required or none (default: the preset's `tool_choice`, then
    /// `[tools] choice`).
    #[arg(
        long,
        global = true,
        value_name = "auto|required|none",
        value_parser = super::super::tools::parse_choice
    )]
    pub tool_choice: Option<ToolChoice>,
    /// Approve every tool call (a headless run denies them otherwise, and says so on stderr).
    #[arg(long, global = true)]
    pub yes: bool,
    /// Gemma 4 thinking: off, low, medium, high, unbounded or thought tokens per turn; alone,
    /// medium (default: the preset's `thinking`, then `[model] thinking`). `template render`
    /// renders with `enable_thinking` unless it is off.
    #[arg(
        long,
        global = true,
        value_name = "LEVEL",
        num_args = 0..=1,
        default_missing_value = "medium",
        value_parser = Thinking::parse
    )]
    pub thinking: Option<Thinking>,
}

impl TabArgs {
    /// The TUI takes `--preset` as the preset of its new tabs; a system prompt is set per tab
    /// there (`/system TEXT`).
    pub fn for_tui(&self, config: &mut Config) -> anyhow::Result<()> {
        if self.system.is_some() {
            bail!(
                "--system is for --prompt and piped chat; in the app, `/system TEXT` sets a \
                 tab's system prompt (or use a preset: --preset NAME)"
            );
        }
        if self.yes {
            bail!(
                "--yes is for --prompt and piped chat; in the app, each call asks (y once, t for \
                 the tab, a always; [mcp.servers.NAME] auto_approve lists tools that never ask)"
            );
        }
        if let Some(name) = &self.preset {
            // An unknown name is refused here, before the app starts.
            config.preset(name).map_err(anyhow::Error::msg)?;
            config.ui.default_preset = name.clone();
        }
        if let Some(choice) = self.tool_choice {
            // New tabs' default; a preset's own `tool_choice` still wins there.
            config.tools.choice = choice;
        }
        if let Some(level) = self.thinking {
            // New tabs' default, as for the tool choice.
            config.model.thinking = level;
        }
        Ok(())
    }
}
