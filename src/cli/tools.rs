//! The config's tools for the engine: `[mcp.servers.NAME]` and `[tools]` turned into the tool
//! host's settings (every problem named by its key), the host started when anything is
//! configured, and how headless runs show the host's servers, a call and its result on stderr.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use gemma_app::config::Config;
use gemma_engine::SharedTools;
use gemma_engine::protocol::{
    Command, Event, TabId, ToolCall, ToolChoice, ToolDecision, ToolOutcome, TurnStats,
};
use gemma_tools::config::{self as tc, BuiltinConfig, Limits};
use gemma_tools::host::ToolHost;

use super::printable;

/// The tool host's settings from the config; `None` when it configures no server and no
/// built-in.
pub fn tools_config(config: &Config) -> anyhow::Result<Option<tc::ToolsConfig>> {
    if !config.tools_configured() {
        return Ok(None);
    }
    let t = &config.tools;
    // The config's servers are the host's own type, checked when the file was read.
    for (name, s) in &config.mcp.servers {
        s.check(name)
            .map_err(|e| anyhow::anyhow!("mcp.servers.{name}: {e}"))?;
    }
    let servers = config.mcp.servers.clone();
    let builtin = BuiltinConfig {
        fetch_url: t.fetch_url,
        web_search: Some(t.web_search.trim().to_owned()).filter(|u| !u.is_empty()),
        read_file: t.read_file.iter().map(|d| expand_home(d)).collect(),
        allow_private: t.allow_private,
        auto_approve: t.auto_approve.clone(),
        max_fetch_bytes: t.max_fetch_bytes,
    };
    Ok(Some(tc::ToolsConfig {
        servers,
        builtin,
        limits: limits(config),
    }))
}

/// The bounds `[tools]` sets on calls (a host's, and the engine's for a front end's own tools).
pub fn limits(config: &Config) -> Limits {
    let t = &config.tools;
    Limits {
        max_calls: t.max_calls,
        max_call_tokens: t.max_call_tokens,
        max_result_bytes: t.max_result_bytes,
        call_timeout: Duration::from_secs_f64(t.call_timeout),
        start_timeout: Duration::from_secs_f64(t.start_timeout),
    }
}

/// `~` and `~/…` under the home directory; other paths as written.
fn expand_home(dir: &str) -> std::path::PathBuf {
    let home = || std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"));
    match dir.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') || rest.starts_with('\\') => {
            match home() {
                Some(h) => std::path::PathBuf::from(h).join(rest.trim_start_matches(['/', '\\'])),
                None => dir.into(),
            }
        }
        _ => dir.into(),
    }
}

/// The started tools, for the engine and for the front end that waits on them.
pub struct Tools {
    /// The host, shared with the engine.
    pub host: Arc<ToolHost>,
    /// How long the servers may take to start.
    pub start_timeout: Duration,
}

impl Tools {
    /// The host as the engine's options hold it.
    pub fn shared(&self) -> SharedTools {
        SharedTools(Arc::clone(&self.host))
    }

    /// Waits until every enabled server has started or failed (at most `start_timeout`), then
    /// says on stderr which failed or is still starting (and which tools are not offered).
    pub fn wait_and_warn(&self, console: &mut ToolConsole) {
        self.host.wait_started(self.start_timeout);
        let servers = self.host.servers();
        console.on_servers(
            servers
                .iter()
                .map(|s| (s.name.as_str(), s.error.as_deref())),
        );
        for s in servers.iter().filter(|s| s.state == "starting") {
            errln!(
                "warning: tools: {} has not started within {:.0} s ([tools] start_timeout); its \
                 tools come when it does",
                printable(&s.name, false),
                self.start_timeout.as_secs_f64()
            );
        }
    }
}

/// Starts the tool host when the config names any server or built-in (servers start in the
/// background; see [`Tools::wait_and_warn`]).
pub fn start_tools(config: &Config) -> anyhow::Result<Option<Tools>> {
    let Some(settings) = tools_config(config).context("the config's tools")? else {
        return Ok(None);
    };
    let start_timeout = settings.limits.start_timeout;
    Ok(Some(Tools {
        host: Arc::new(ToolHost::start(settings)),
        start_timeout,
    }))
}

/// `--tool-choice`'s value.
pub fn parse_choice(name: &str) -> Result<ToolChoice, String> {
    ToolChoice::parse(name).ok_or_else(|| format!("{name:?}: use auto, required or none"))
}

/// The tools for a headless tab: the host when the config names any, and the tab's choice
/// (`flag` > the `preset`'s > `[tools] choice`).
pub fn tools_for(
    config: &Config,
    flag: Option<ToolChoice>,
    preset: Option<&str>,
) -> anyhow::Result<(Option<Tools>, ToolChoice)> {
    let choice = flag.unwrap_or_else(|| config.tool_choice(preset));
    let tools = start_tools(config)?;
    if tools.is_none() && choice == ToolChoice::Required {
        return Err(super::Refused(
            "tool_choice is \"required\", but the config names no tool: add an \
             [mcp.servers.NAME] (or `gemma-chat mcp import FILE`) or a built-in in [tools]"
                .into(),
        )
        .into());
    }
    Ok((tools, choice))
}

/// What a headless run does with the engine's tool events: approves a call with `--yes`, else
/// denies it; prints every call with its result on stderr (`tool NAME {json args} -> N bytes`),
/// and each server's error once.
#[derive(Debug, Default)]
pub struct ToolConsole {
    /// `--yes`: approve every call.
    pub yes: bool,
    /// The calls waiting for their result, by id: how they print.
    calls: std::collections::HashMap<u64, String>,
    /// The server errors said already.
    warned: std::collections::HashSet<(String, String)>,
}

impl ToolConsole {
    /// A console that approves every call when `yes`.
    pub fn new(yes: bool) -> Self {
        Self {
            yes,
            ..Self::default()
        }
    }

    /// Takes the tool events of tab `tab` (and the catalogue's): what to send the engine back.
    pub fn on_event(&mut self, tab: TabId, event: &Event) -> Option<Command> {
        match event {
            Event::ToolCall {
                tab: t,
                call,
                approval,
            } if *t == tab => {
                let decision = self.on_call(call, *approval)?;
                Some(Command::DecideTool {
                    tab,
                    call: call.id,
                    decision,
                })
            }
            Event::ToolResult { tab: t, outcome } if *t == tab => {
                self.on_result(outcome);
                None
            }
            Event::Tools { servers, .. } => {
                self.on_servers(
                    servers
                        .iter()
                        .map(|s| (s.name.as_str(), s.error.as_deref())),
                );
                None
            }
            _ => None,
        }
    }

    /// The model called `call`; with `approval`, the answer to send back.
    pub fn on_call(&mut self, call: &ToolCall, approval: bool) -> Option<ToolDecision> {
        self.calls.insert(call.id, describe_call(call));
        if !approval {
            return None;
        }
        if self.yes {
            return Some(ToolDecision::Once);
        }
        errln!(
            "tool {} denied (run with --yes to approve tool calls)",
            printable(&call.name, false)
        );
        Some(ToolDecision::Deny { note: None })
    }

    /// A call ended: its line on stderr.
    pub fn on_result(&mut self, outcome: &ToolOutcome) {
        let call = self
            .calls
            .remove(&outcome.id)
            .unwrap_or_else(|| format!("tool {} {{}}", printable(&outcome.name, false)));
        errln!("{call}{}", describe_outcome(outcome));
    }

    /// Servers and their errors (from the host, or an `Event::Tools`): each new error on stderr.
    pub fn on_servers<'a>(
        &mut self,
        servers: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) {
        for (name, error) in servers {
            let Some(error) = error else { continue };
            if self.warned.insert((name.to_owned(), error.to_owned())) {
                errln!(
                    "warning: tools: {}: {}",
                    printable(name, false),
                    printable(error, false)
                );
            }
        }
    }
}

/// ` · N tool calls, M tokens of results fed warm` for a turn that called tools, else nothing.
pub fn describe_stats(s: &TurnStats) -> String {
    match s.tool_calls {
        0 => String::new(),
        n => format!(
            " · {n} tool call{}, {} tokens of results fed warm",
            if n == 1 { "" } else { "s" },
            s.tool_tokens
        ),
    }
}

/// `tool NAME {json args}` as headless runs print a call, cleaned for the terminal.
pub fn describe_call(call: &ToolCall) -> String {
    format!(
        "tool {} {}",
        printable(&call.name, false),
        printable(&call.arguments, false)
    )
}

/// ` -> N bytes`, or ` -> failed: WHY` for a call that failed, was denied or stopped.
pub fn describe_outcome(outcome: &ToolOutcome) -> String {
    if outcome.ok {
        format!(" -> {} bytes", outcome.bytes)
    } else {
        let why: String = outcome.text.chars().take(300).collect();
        let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
        format!(" -> failed: {}", printable(&why, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_layers(Some((std::path::Path::new("u.toml"), text))).expect("valid")
    }

    #[test]
    fn nothing_configured_starts_nothing() {
        assert!(tools_config(&config("")).expect("ok").is_none());
    }

    #[test]
    fn the_file_s_settings_reach_the_host_s() {
        let c = config(
            "[tools]\nfetch_url = true\nread_file = [\"~/notes\", \"/srv\"]\nmax_calls = 3\n\
             call_timeout = 1.5\nauto_approve = [\"fetch_url\"]\n\
             [mcp.servers.a]\ncommand = \"srv\"\nargs = [\"-v\"]\nenv = { K = \"${K}\" }\n\
             auto_approve = [\"t\"]\n[mcp.servers.b]\nurl = \"http://h/mcp\"\nenabled = false\n",
        );
        let t = tools_config(&c).expect("ok").expect("some");
        assert_eq!(t.limits.max_calls, 3);
        assert_eq!(t.limits.call_timeout, Duration::from_millis(1500));
        assert_eq!(
            t.limits.max_result_bytes,
            Limits::default().max_result_bytes
        );
        assert!(t.builtin.fetch_url && t.builtin.web_search.is_none());
        assert_eq!(t.builtin.auto_approve, ["fetch_url"]);
        assert_eq!(t.builtin.read_file[1], std::path::PathBuf::from("/srv"));
        assert!(!t.builtin.read_file[0].starts_with("~"));
        let a = &t.servers["a"];
        assert_eq!(
            (a.command.as_deref(), a.args.as_slice()),
            (Some("srv"), ["-v".to_string()].as_slice())
        );
        assert_eq!(a.env["K"], "${K}");
        assert_eq!(a.auto_approve, ["t"]);
        assert!(!t.servers["b"].enabled);
    }

    #[test]
    fn calls_are_approved_with_yes_and_denied_without() {
        let call = ToolCall {
            id: 7,
            name: "f".into(),
            server: "s".into(),
            arguments: "{}".into(),
            ..Default::default()
        };
        let asks = |approval| Event::ToolCall {
            tab: 2,
            call: call.clone(),
            approval,
        };
        let decide = |decision| {
            Some(Command::DecideTool {
                tab: 2,
                call: 7,
                decision,
            })
        };
        let mut yes = ToolConsole::new(true);
        assert_eq!(yes.on_event(2, &asks(true)), decide(ToolDecision::Once));
        assert_eq!(yes.on_event(2, &asks(false)), None);
        assert_eq!(yes.on_event(3, &asks(true)), None, "another tab's call");
        let mut no = ToolConsole::new(false);
        assert_eq!(
            no.on_event(2, &asks(true)),
            decide(ToolDecision::Deny { note: None })
        );
    }

    #[test]
    fn calls_and_outcomes_print_as_one_clean_line() {
        let call = ToolCall {
            id: 1,
            name: "get\u{1b}[2J".into(),
            server: "s".into(),
            arguments: "{\"q\":\"x\"}".into(),
            ..Default::default()
        };
        assert_eq!(describe_call(&call), "tool get[2J {\"q\":\"x\"}");
        let mut o = ToolOutcome {
            id: 1,
            name: "get".into(),
            ok: true,
            text: "abc".into(),
            bytes: 1234,
            seconds: 0.1,
            ..Default::default()
        };
        assert_eq!(describe_outcome(&o), " -> 1234 bytes");
        o.ok = false;
        o.text = "server\ncrashed\u{7}".into();
        assert_eq!(describe_outcome(&o), " -> failed: server crashed");
    }
}
