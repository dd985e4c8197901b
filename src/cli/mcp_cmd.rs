//! `gemma-chat mcp import FILE` (Claude Desktop's or oterm's `{"mcpServers": {…}}` JSON
//! appended to the config file as `[mcp.servers.NAME]` tables) and `gemma-chat mcp list` (the
//! configured servers started, with their state and tools).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gemma_app::config::{Config, config_path};
use gemma_tools::config::{ServerConfig, import_mcp_servers, servers_to_toml};

use super::tools::start_tools;
use super::{ModelArgs, Refused, printable};

/// The largest file `mcp import` reads.
const IMPORT_LIMIT: u64 = 4 << 20;

/// Arguments of `mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Add the servers of an `{"mcpServers": {…}}` JSON file (Claude Desktop's
    /// claude_desktop_config.json, oterm's config.json) to the config file.
    Import {
        /// The JSON file (`-`: stdin).
        file: PathBuf,
        /// Print the TOML tables instead of adding them to the config file.
        #[arg(long)]
        print: bool,
    },
    /// Start the configured MCP servers and built-in tools, and list them with their tools.
    List,
}

/// Runs `mcp`.
pub fn run(args: McpArgs, common: &ModelArgs) -> anyhow::Result<()> {
    match args.action {
        Action::Import { file, print } => import(&file, print, common),
        Action::List => list(common),
    }
}

/// `mcp import FILE [--print]`.
fn import(file: &Path, print: bool, common: &ModelArgs) -> anyhow::Result<()> {
    let json = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading stdin")?;
        text
    } else {
        super::read_text(file, IMPORT_LIMIT)?
    };
    let servers =
        import_mcp_servers(&json).map_err(|e| Refused(format!("{}: {e}", file.display())))?;
    if servers.is_empty() {
        bail!("{}: \"mcpServers\" lists no server", file.display());
    }
    if print {
        out!("{}", printable(&servers_to_toml(&servers), false))?;
        return Ok(());
    }
    let path = config_path(common.config.as_deref())
        .context("no config directory could be found for this platform; use --config PATH")?;
    // Edit the file a symlink points to, not the link.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let old = if path.exists() {
        super::read_text(&path, 1 << 20)?
    } else {
        String::new()
    };
    let new = appended(&path, &old, &servers)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    gemma_files::write_atomic(&path, new.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    for (name, s) in &servers {
        let how = match (&s.command, &s.url) {
            (Some(c), _) => format!("stdio: {c} {}", s.args.join(" ")),
            (None, Some(u)) => format!("http: {u}"),
            (None, None) => String::new(),
        };
        let off = if s.enabled { "" } else { " (disabled)" };
        outln!(
            "added [mcp.servers.{}] ({}){off}",
            key_name(name),
            printable(how.trim_end(), false)
        )?;
    }
    outln!("to {}", path.display())?;
    Ok(())
}

/// `old`, the config file at `path`, with `servers` appended as TOML tables: refused when a
/// name is taken, or when the result is not a valid configuration.
fn appended(
    path: &Path,
    old: &str,
    servers: &BTreeMap<String, ServerConfig>,
) -> anyhow::Result<String> {
    let current = Config::from_layers(Some((path, old))).with_context(|| {
        format!(
            "{} must be valid before servers are added to it",
            path.display()
        )
    })?;
    let taken: Vec<&str> = servers
        .keys()
        .filter(|n| current.mcp.servers.contains_key(*n))
        .map(String::as_str)
        .collect();
    if !taken.is_empty() {
        return Err(Refused(format!(
            "{} already has [mcp.servers.{}]: remove or rename it there (or the entry in the \
             JSON), then import again",
            path.display(),
            printable(&taken.join("], [mcp.servers."), false)
        ))
        .into());
    }
    let sep = match old {
        "" => "",
        t if t.ends_with("\n\n") => "",
        t if t.ends_with('\n') => "\n",
        _ => "\n\n",
    };
    let new = format!("{old}{sep}{}", servers_to_toml(servers));
    Config::from_layers(Some((path, &new)))
        .context("the imported servers do not fit the config")?;
    Ok(new)
}

/// A server's name on one line, as the config's table header writes it: bare when it is a bare
/// TOML key, else quoted with its escapes (a newline in a name would print as lines of their
/// own, and could pass for other output).
fn key_name(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        name.to_owned()
    } else {
        printable(&serde_json::to_string(name).unwrap_or_default(), false).into_owned()
    }
}

/// `mcp list`: starts the tools, waits for them, and lists servers and tools.
fn list(common: &ModelArgs) -> anyhow::Result<()> {
    let config = common.config()?;
    let Some(tools) = start_tools(&config)? else {
        outln!(
            "no tools configured: add [mcp.servers.NAME] (or `gemma-chat mcp import FILE`) or a \
             built-in in [tools]; `gemma-chat config path` says where the config is"
        )?;
        return Ok(());
    };
    errln!(
        "starting the servers (up to {:.0} s)…",
        tools.start_timeout.as_secs_f64()
    );
    tools.host.wait_started(tools.start_timeout);
    let specs = tools.host.tools();
    for server in tools.host.servers() {
        let mine: Vec<_> = specs.iter().filter(|t| t.server == server.name).collect();
        let state = match (&server.error, server.state.as_str()) {
            (Some(e), state) => format!("{state}: {}", printable(e, false)),
            (None, "ready") => format!("{} tools", mine.len()),
            (None, state) => state.to_owned(),
        };
        outln!(
            "{} ({}) — {state}",
            key_name(&server.name),
            server.transport
        )?;
        for t in mine {
            let line = t.description.lines().next().unwrap_or("");
            let short: String = line.chars().take(100).collect();
            let ask = if t.auto_approve {
                " (auto-approved)"
            } else {
                ""
            };
            outln!(
                "  {}{ask}  {}",
                printable(&t.name, false),
                printable(&short, false)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "srv", "/tmp"], "env": {"K": "v"}},
        "web": {"url": "https://h/mcp", "headers": {"Authorization": "${WEB_KEY}"}}
    }}"#;

    #[test]
    fn a_server_name_prints_on_one_line() {
        assert_eq!(key_name("files"), "files");
        let spoof = "new\nline = 1\n[evil]\nx";
        let shown = key_name(spoof);
        assert!(!shown.contains('\n'), "{shown}");
        assert_eq!(shown, r#""new\nline = 1\n[evil]\nx""#);
        assert_eq!(key_name("web search"), r#""web search""#);
    }

    #[test]
    fn imported_servers_are_appended_and_read_back() {
        let servers = import_mcp_servers(JSON).expect("json");
        let old = "# mine\n[ui]\ntheme = \"light\"";
        let new = appended(Path::new("u.toml"), old, &servers).expect("appended");
        assert!(
            new.starts_with("# mine\n[ui]\ntheme = \"light\"\n\n[mcp.servers."),
            "{new}"
        );
        let c = Config::from_layers(Some((Path::new("u.toml"), &new))).expect("valid");
        assert_eq!(c.mcp.servers["files"].args, ["-y", "srv", "/tmp"]);
        assert_eq!(c.mcp.servers["web"].headers_env["Authorization"], "WEB_KEY");
        let again = appended(Path::new("u.toml"), &new, &servers).expect_err("taken");
        assert!(
            again
                .to_string()
                .contains("already has [mcp.servers.files], [mcp.servers.web]"),
            "{again}"
        );
        assert!(appended(Path::new("u.toml"), "", &servers).is_ok());
    }
}
