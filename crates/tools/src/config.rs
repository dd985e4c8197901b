//! The tools' settings as plain data: the MCP servers ([`ServerConfig`]), the built-in tools
//! ([`BuiltinConfig`]) and the bounds on every call ([`Limits`]); `${VAR}` substitution in the
//! values that reach a server ([`substitute`]); and the `mcpServers` JSON of Claude Desktop and
//! oterm read in ([`import_mcp_servers`]) and written out as TOML tables ([`servers_to_toml`]).
//! The app parses its TOML itself; the serde derives here only name the keys it reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The server name the built-in tools are listed under (no MCP server may take it).
pub const BUILTIN_SERVER: &str = "builtin";

/// A bad setting, named so that the user can find it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `${NAME}` named a variable the environment does not hold.
    #[error("the environment variable {0} is not set (named as ${{{0}}})")]
    MissingVar(String),
    /// `${` without its `}`, or `${}` / `${1X}`: not a variable name.
    #[error("`{0}` is not a ${{VAR}} reference (write $$ for a literal $)")]
    BadReference(String),
    /// The JSON to import is not the `{"mcpServers": {…}}` shape.
    #[error("not an MCP servers file: {0}")]
    Import(String),
    /// A server with neither or both of `command` and `url`, or a reserved name.
    #[error("MCP server `{name}`: {why}")]
    Server {
        /// The server's name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Every tool setting: the MCP servers by name, the built-ins, the bounds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// The MCP servers, by the name the user gave them.
    pub servers: BTreeMap<String, ServerConfig>,
    /// The built-in tools (all off by default).
    pub builtin: BuiltinConfig,
    /// The bounds on calls and results.
    pub limits: Limits,
}

/// One MCP server: a child process over stdio (`command`) or a streamable-HTTP endpoint (`url`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The program to start (stdio transport), found on `PATH`.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// The child's whole environment besides `PATH` and `HOME`; values may hold `${VAR}`, taken
    /// from gemma-chat's environment when the server starts.
    pub env: BTreeMap<String, String>,
    /// The endpoint of a streamable-HTTP server.
    pub url: Option<String>,
    /// HTTP headers whose values come from the environment: header name → the name of the
    /// variable holding its value (so secrets stay out of the config file).
    pub headers_env: BTreeMap<String, String>,
    /// HTTP headers given in the config; values may hold `${VAR}`.
    pub headers: BTreeMap<String, String>,
    /// Off: the server is not started. Default on.
    pub enabled: bool,
    /// Tools of this server (by the server's own names) that run without asking.
    pub auto_approve: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            headers_env: BTreeMap::new(),
            headers: BTreeMap::new(),
            enabled: true,
            auto_approve: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Checks that the server has exactly one transport, a usable name and header variables
    /// that can be names: what the config file's check and the host both refuse, in one place.
    pub fn check(&self, name: &str) -> Result<(), ConfigError> {
        match self.problem(name) {
            Some(why) => Err(ConfigError::Server {
                name: name.to_owned(),
                why,
            }),
            None => Ok(()),
        }
    }

    /// Why the server cannot be started as given (see [`ServerConfig::check`]).
    pub fn problem(&self, name: &str) -> Option<String> {
        if name == BUILTIN_SERVER {
            return Some(format!(
                "the name `{BUILTIN_SERVER}` is the built-in tools'; pick another"
            ));
        }
        if name.trim().is_empty() {
            return Some("a server needs a name".to_owned());
        }
        let transport = match (&self.command, &self.url) {
            (Some(_), Some(_)) => Some("give either `command` or `url`, not both".to_owned()),
            (None, None) => {
                Some("give `command` (a program, over stdio) or `url` (HTTP)".to_owned())
            }
            (Some(c), None) if c.trim().is_empty() => Some("`command` is empty".to_owned()),
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                Some(format!("`url` {u:?} must start with http:// or https://"))
            }
            _ => None,
        };
        transport.or_else(|| {
            let (header, var) = self.headers_env.iter().find(|(_, v)| !is_env_name(v))?;
            Some(format!(
                "`headers_env.{header}` = {var:?} is not the NAME of an environment variable"
            ))
        })
    }
}

/// Whether `s` can be an environment variable's name.
pub fn is_env_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 128
}

/// The built-in tools, listed under the server name [`BUILTIN_SERVER`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuiltinConfig {
    /// `fetch_url {url}`: the readable text of a web page.
    pub fetch_url: bool,
    /// `web_search {query}`: the base URL of a SearXNG instance (its JSON API must be enabled).
    /// The instance is trusted: it may be on this machine or the local network.
    pub web_search: Option<String>,
    /// `read_file {path}`: the directories files may be read from; empty turns it off.
    pub read_file: Vec<PathBuf>,
    /// `fetch_url` may reach loopback, private and link-local addresses.
    pub allow_private: bool,
    /// Built-in tools that run without asking.
    pub auto_approve: Vec<String>,
    /// Most bytes read of a page, a search answer or a file.
    pub max_fetch_bytes: usize,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        BuiltinConfig {
            fetch_url: false,
            web_search: None,
            read_file: Vec::new(),
            allow_private: false,
            auto_approve: Vec::new(),
            max_fetch_bytes: 1 << 20,
        }
    }
}

/// The bounds on tool calls.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most tool calls in one turn (the engine counts them).
    pub max_calls: usize,
    /// Most tokens one call's arguments may take before the engine finishes it by force.
    pub max_call_tokens: usize,
    /// Most bytes of a result's text given to the model; the rest is cut with a note.
    pub max_result_bytes: usize,
    /// Longest wait for one request to a server, or one built-in call (seconds in TOML).
    #[serde(deserialize_with = "seconds")]
    pub call_timeout: Duration,
    /// Longest wait for a server to start and list its tools (seconds in TOML).
    #[serde(deserialize_with = "seconds")]
    pub start_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_calls: 8,
            max_call_tokens: 2048,
            max_result_bytes: 16 * 1024,
            call_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(20),
        }
    }
}

/// A duration written as seconds (an integer or a fraction), from a tenth of a second to a day.
fn seconds<'de, D: Deserializer<'de>>(de: D) -> Result<Duration, D::Error> {
    let secs = f64::deserialize(de)?;
    if !(0.1..=86_400.0).contains(&secs) {
        return Err(serde::de::Error::custom(format!(
            "{secs} s is out of range (0.1 to 86400 seconds)"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Replaces each `${VAR}` in `value` with `env(VAR)`; `$$` is a literal `$`, and a `$` followed by
/// anything else stays as it is. A variable `env` does not know is an error naming it.
pub fn substitute(
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(after) = tail.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(inner) = tail.strip_prefix('{') {
            let Some(end) = inner.find('}') else {
                return Err(ConfigError::BadReference(clip(&rest[at..])));
            };
            let name = &inner[..end];
            if !is_var_name(name) {
                return Err(ConfigError::BadReference(format!("${{{name}}}")));
            }
            out.push_str(&env(name).ok_or_else(|| ConfigError::MissingVar(name.to_owned()))?);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A shell-style variable name: a letter or `_`, then letters, digits and `_`.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The first 40 characters of `s`, for a message.
fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Reads the servers of a Claude Desktop / oterm `{"mcpServers": {NAME: {command, args, env,
/// url, headers, disabled}}}` file. A header whose value is exactly `${VAR}` becomes a
/// `headers_env` entry; other header values are kept as `headers` (still `${VAR}`-substituted).
/// `autoApprove` (Cline's key) becomes `auto_approve`; `type`/`transport` are ignored (the
/// transport follows from `command` or `url`).
pub fn import_mcp_servers(json: &str) -> Result<BTreeMap<String, ServerConfig>, ConfigError> {
    let root: Value =
        serde_json::from_str(json).map_err(|e| ConfigError::Import(format!("bad JSON: {e}")))?;
    let servers = root
        .get("mcpServers")
        .and_then(Value::as_object)
        .ok_or_else(|| ConfigError::Import("no \"mcpServers\" object at the top".to_owned()))?;
    let mut out = BTreeMap::new();
    for (name, entry) in servers {
        let server = import_one(name, entry)?;
        server.check(name)?;
        out.insert(name.clone(), server);
    }
    Ok(out)
}

/// One `mcpServers` entry.
fn import_one(name: &str, entry: &Value) -> Result<ServerConfig, ConfigError> {
    let bad = |why: String| ConfigError::Server {
        name: name.to_owned(),
        why,
    };
    let obj = entry
        .as_object()
        .ok_or_else(|| bad("not a JSON object".to_owned()))?;
    let string = |key: &str| -> Result<Option<String>, ConfigError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(format!("`{key}` is not a string"))),
        }
    };
    let strings = |key: &str| -> Result<Vec<String>, ConfigError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("`{key}` holds a non-string"))),
            Some(_) => Err(bad(format!("`{key}` is not a list"))),
        }
    };
    let map = |key: &str| -> Result<BTreeMap<String, String>, ConfigError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("`{key}` holds a non-string value"))),
            Some(_) => Err(bad(format!("`{key}` is not an object"))),
        }
    };
    let mut server = ServerConfig {
        command: string("command")?,
        args: strings("args")?,
        env: map("env")?,
        url: string("url")?,
        enabled: !obj
            .get("disabled")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        auto_approve: strings("autoApprove")?,
        ..ServerConfig::default()
    };
    for (header, value) in map("headers")? {
        let whole_var = value
            .strip_prefix("${")
            .and_then(|v| v.strip_suffix('}'))
            .filter(|v| is_var_name(v));
        match whole_var {
            Some(var) => server.headers_env.insert(header, var.to_owned()),
            None => server.headers.insert(header, value),
        };
    }
    Ok(server)
}

/// The servers as `[mcp.servers.NAME]` TOML tables, for appending to the config file.
pub fn servers_to_toml(servers: &BTreeMap<String, ServerConfig>) -> String {
    let mut out = String::new();
    for (name, s) in servers {
        let _ = writeln!(out, "[mcp.servers.{}]", toml_key(name));
        if let Some(command) = &s.command {
            let _ = writeln!(out, "command = {}", toml_string(command));
        }
        if !s.args.is_empty() {
            let _ = writeln!(out, "args = {}", toml_array(&s.args));
        }
        if let Some(url) = &s.url {
            let _ = writeln!(out, "url = {}", toml_string(url));
        }
        for (key, table) in [
            ("env", &s.env),
            ("headers_env", &s.headers_env),
            ("headers", &s.headers),
        ] {
            if !table.is_empty() {
                let _ = writeln!(out, "{key} = {}", toml_inline_table(table));
            }
        }
        if !s.enabled {
            out.push_str("enabled = false\n");
        }
        if !s.auto_approve.is_empty() {
            let _ = writeln!(out, "auto_approve = {}", toml_array(&s.auto_approve));
        }
        out.push('\n');
    }
    out
}

/// A TOML key: bare when it can be, quoted otherwise.
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

/// A TOML basic string, escaped.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML array of strings on one line.
fn toml_array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| toml_string(s)).collect();
    format!("[{}]", items.join(", "))
}

/// A TOML inline table of strings.
fn toml_inline_table(table: &BTreeMap<String, String>) -> String {
    let items: Vec<String> = table
        .iter()
        .map(|(k, v)| format!("{} = {}", toml_key(k), toml_string(v)))
        .collect();
    format!("{{ {} }}", items.join(", "))
}
