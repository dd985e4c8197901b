//! The tool settings as the file writes them: `[tools]` (the tabs' default `tool_choice`, the
//! bounds on calls, the built-in tools) and `[mcp.servers.NAME]` (one MCP server each). The app
//! only reads and checks them, and resolves a tab's tool choice (preset > `[tools] choice`); the
//! binary hands them to the tool host. A server's table is the tools crate's own
//! [`ServerConfig`], checked by its own [`ServerConfig::problem`] (the crate without its host). Saving "always approve" back to the file is
//! [`super::approve`].

use std::collections::BTreeMap;

use gemma_protocol::ToolChoice;
pub use gemma_tools::config::{ServerConfig, is_env_name};
use serde::{Deserialize, Deserializer};

use super::Config;

/// The server name the built-in tools go by (no MCP server may take it).
pub use gemma_tools::config::BUILTIN_SERVER as BUILTIN;

/// The built-in tools' names.
pub const BUILTIN_TOOLS: [&str; 3] = ["fetch_url", "web_search", "read_file"];

/// `[tools]`: the tabs' default tool choice, the bounds on calls, the built-in tools.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// New tabs' `tool_choice` (a preset's wins).
    #[serde(deserialize_with = "choice")]
    pub choice: ToolChoice,
    /// Most tool calls in one answer.
    #[serde(deserialize_with = "super::at_least::<_, _, 1>")]
    pub max_calls: usize,
    /// Most tokens one call's arguments may take before the call is finished by force.
    #[serde(deserialize_with = "super::at_least::<_, _, 16>")]
    pub max_call_tokens: usize,
    /// Most bytes of a tool's result the model gets (the rest is cut, with a note).
    #[serde(deserialize_with = "super::at_least::<_, _, 64>")]
    pub max_result_bytes: usize,
    /// Seconds one call may take.
    #[serde(deserialize_with = "seconds")]
    pub call_timeout: f64,
    /// Seconds the servers may take to start and list their tools.
    #[serde(deserialize_with = "seconds")]
    pub start_timeout: f64,
    /// The built-in `fetch_url`.
    pub fetch_url: bool,
    /// The built-in `web_search`: a SearXNG instance's base URL (empty: off).
    pub web_search: String,
    /// The built-in `read_file`: the directories it may read under (empty: off).
    pub read_file: Vec<String>,
    /// `fetch_url` may reach loopback and private addresses.
    pub allow_private: bool,
    /// Built-in tools that run without asking.
    pub auto_approve: Vec<String>,
    /// Most bytes read of a page, a search answer or a file.
    #[serde(deserialize_with = "super::at_least::<_, _, 1024>")]
    pub max_fetch_bytes: usize,
}

/// `[mcp]`: the MCP servers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// `[mcp.servers.NAME]`, by name: the tools crate's own type, as the host takes it.
    pub servers: BTreeMap<String, ServerConfig>,
}

impl ToolsConfig {
    /// Whether a built-in tool is turned on.
    pub fn any_builtin(&self) -> bool {
        self.fetch_url || !self.web_search.trim().is_empty() || !self.read_file.is_empty()
    }
}

impl Config {
    /// The tool choice of a tab with `preset` (a name from `[presets]`): the preset's
    /// `tool_choice`, else `[tools] choice`.
    pub fn tool_choice(&self, preset: Option<&str>) -> ToolChoice {
        preset
            .and_then(|p| self.presets.get(p))
            .and_then(|p| p.tool_choice)
            .unwrap_or(self.tools.choice)
    }

    /// Whether the file configures any tool: an MCP server or a built-in.
    pub fn tools_configured(&self) -> bool {
        !self.mcp.servers.is_empty() || self.tools.any_builtin()
    }
}

/// Reads `"auto"`, `"required"` or `"none"`.
pub(super) fn choice<'de, D: Deserializer<'de>>(d: D) -> Result<ToolChoice, D::Error> {
    let name = String::deserialize(d)?;
    ToolChoice::parse(&name).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "{name:?} is not a tool choice: use \"auto\", \"required\" or \"none\""
        ))
    })
}

/// A preset's `tool_choice`.
pub(super) fn choice_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ToolChoice>, D::Error> {
    choice(d).map(Some)
}

/// Seconds, from a tenth of a second to a day.
fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let secs = f64::deserialize(d)?;
    if !(0.1..=86_400.0).contains(&secs) {
        return Err(serde::de::Error::custom(format!(
            "{secs} is out of range: allowed 0.1 to 86400 seconds"
        )));
    }
    Ok(secs)
}

/// The rules the types cannot say: the key a broken one is about, and why.
pub(super) fn check(c: &Config) -> Result<(), (String, String)> {
    let t = &c.tools;
    if !t.web_search.trim().is_empty()
        && let Err(why) = super::check_url(t.web_search.trim())
    {
        return Err((
            "tools.web_search".into(),
            format!("`tools.web_search`: {why}"),
        ));
    }
    if let Some(bad) = t
        .auto_approve
        .iter()
        .find(|n| !BUILTIN_TOOLS.contains(&n.as_str()))
    {
        return Err((
            "tools.auto_approve".into(),
            format!(
                "`tools.auto_approve`: there is no built-in tool {bad:?} (built-ins: {})",
                BUILTIN_TOOLS.join(", ")
            ),
        ));
    }
    for (name, server) in &c.mcp.servers {
        let key = format!("mcp.servers.{name}");
        if let Some(why) = server.problem(name) {
            return Err((key.clone(), format!("`{key}`: {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn load(text: &str) -> crate::Result<Config> {
        Config::from_layers(Some((Path::new("u.toml"), text)))
    }

    #[test]
    fn the_defaults_configure_no_tool() {
        let c = Config::builtin().expect("valid");
        assert_eq!(c.tools.choice, ToolChoice::Auto);
        assert_eq!(c.tools.max_calls, 8);
        assert!(!c.tools_configured());
        assert!(c.mcp.servers.is_empty());
    }

    #[test]
    fn servers_and_built_ins_are_read() {
        let text = "[tools]\nchoice = \"none\"\nfetch_url = true\nread_file = [\"~/notes\"]\n\
                    auto_approve = [\"read_file\"]\ncall_timeout = 2.5\n\
                    [mcp.servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"srv\"]\n\
                    env = { TOKEN = \"${TOKEN}\" }\nauto_approve = [\"list\"]\n\
                    [mcp.servers.web]\nurl = \"https://example.com/mcp\"\n\
                    headers_env = { Authorization = \"WEB_KEY\" }\nenabled = false\n";
        let c = load(text).expect("valid");
        assert!(c.tools_configured());
        assert_eq!(c.tools.choice, ToolChoice::None);
        assert_eq!(c.tools.call_timeout, 2.5);
        let files = &c.mcp.servers["files"];
        assert_eq!(files.command.as_deref(), Some("npx"));
        assert_eq!(files.args, ["-y", "srv"]);
        assert_eq!(files.env["TOKEN"], "${TOKEN}");
        assert!(files.enabled);
        let web = &c.mcp.servers["web"];
        assert!(!web.enabled);
        assert_eq!(web.headers_env["Authorization"], "WEB_KEY");
    }

    #[test]
    fn a_preset_s_tool_choice_wins_over_the_file_s() {
        let text = "[tools]\nchoice = \"none\"\n[presets.agent]\ntool_choice = \"required\"\n\
                    [presets.plain]\nsystem = \"hi\"\n";
        let c = load(text).expect("valid");
        assert_eq!(c.tool_choice(Some("agent")), ToolChoice::Required);
        assert_eq!(c.tool_choice(Some("plain")), ToolChoice::None);
        assert_eq!(c.tool_choice(Some("missing")), ToolChoice::None);
        assert_eq!(c.tool_choice(None), ToolChoice::None);
    }

    #[test]
    fn bad_tool_settings_are_refused_naming_the_key() {
        let err = |text: &str| load(text).expect_err("invalid").to_string();
        let e = err("[mcp.servers.foo]\nargs = [\"x\"]\n");
        assert!(
            e.contains("u.toml:1:") && e.contains("`mcp.servers.foo`: give `command`"),
            "{e}"
        );
        let e = err("[mcp.servers.foo]\ncommand = \"a\"\nurl = \"http://h\"\n");
        assert!(e.contains("not both"), "{e}");
        let e = err("[mcp.servers.foo]\nurl = \"ftp://h\"\n");
        assert!(e.contains("http:// or https://"), "{e}");
        let e = err("[mcp.servers.builtin]\ncommand = \"a\"\n");
        assert!(e.contains("built-in tools'"), "{e}");
        let e = err("[mcp.servers.foo]\ncomand = \"a\"\n");
        assert!(e.contains("comand"), "{e}");
        let e = err("[tools]\nchoice = \"always\"\n");
        assert!(
            e.contains("`tools.choice`") && e.contains("\"required\""),
            "{e}"
        );
        let e = err("[presets.a]\ntool_choice = \"maybe\"\n");
        assert!(e.contains("`presets.a.tool_choice`"), "{e}");
        let e = err("[tools]\nauto_approve = [\"rm\"]\n");
        assert!(e.contains("no built-in tool \"rm\""), "{e}");
        let e = err("[tools]\nweb_search = \"searx\"\n");
        assert!(e.contains("`tools.web_search`"), "{e}");
        let e = err("[tools]\ncall_timeout = 0\n");
        assert!(
            e.contains("`tools.call_timeout`") && e.contains("0.1 to 86400"),
            "{e}"
        );
        let e = err("[tools]\nmax_calls = 0\n");
        assert!(e.contains("`tools.max_calls`"), "{e}");
        let e = err("[mcp.servers.w]\nurl = \"http://h\"\nheaders_env = { A = \"sk-123 x\" }\n");
        assert!(e.contains("headers_env.A"), "{e}");
    }
}
