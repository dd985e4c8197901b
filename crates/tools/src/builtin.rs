//! The built-in tools, listed under the server name `builtin` when enabled: `fetch_url` (the
//! readable text of a web page, through [`net`]'s checked fetch and [`html`]'s
//! reduction), `web_search` (a SearXNG instance's JSON results as text) and `read_file` (a text
//! file under the configured roots). Each declares its JSON schema; each call is bounded by
//! `max_fetch_bytes` and the host's call time-out.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::config::BuiltinConfig;
use crate::host::clean;
use crate::mcp::RawTool;

pub mod html;
pub mod net;

/// Most search results given.
pub const MAX_RESULTS: usize = 8;

/// A failed built-in call, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    /// A required argument is missing or not a string.
    #[error("the argument `{0}` (a string) is required")]
    Argument(&'static str),
    /// No such built-in (or it is turned off).
    #[error("there is no built-in tool `{0}`")]
    Unknown(String),
    /// The fetch failed.
    #[error(transparent)]
    Net(#[from] net::NetError),
    /// Not text.
    #[error("{0}")]
    NotText(String),
    /// `read_file` refused or failed.
    #[error("{0}")]
    File(String),
    /// The search instance did not answer as SearXNG does.
    #[error("{0}")]
    Search(String),
}

/// The enabled built-ins, ready to call.
pub struct Builtins {
    config: BuiltinConfig,
    roots: Vec<PathBuf>,
    problems: Vec<String>,
    fetch: Option<reqwest::Client>,
    search: Option<reqwest::Client>,
}

impl Builtins {
    /// The built-ins `config` enables, with HTTP clients bounded by `timeout`. A `read_file`
    /// root that cannot be resolved is left out and named in [`Builtins::problems`].
    pub fn new(config: &BuiltinConfig, timeout: Duration) -> Self {
        let mut problems = Vec::new();
        let mut roots = Vec::new();
        for root in &config.read_file {
            match root.canonicalize() {
                Ok(path) if path.is_dir() => roots.push(path),
                Ok(_) => problems.push(format!(
                    "read_file root {} is not a directory",
                    root.display()
                )),
                Err(e) => problems.push(format!("read_file root {}: {e}", root.display())),
            }
        }
        let mut client = |wanted: bool, allow_private: bool| {
            if !wanted {
                return None;
            }
            net::client(allow_private, timeout)
                .map_err(|e| problems.push(e.to_string()))
                .ok()
        };
        let fetch = client(config.fetch_url, config.allow_private);
        let search = client(config.web_search.is_some(), true);
        Builtins {
            config: config.clone(),
            roots,
            problems,
            fetch,
            search,
        }
    }

    /// What could not be set up, in sentences.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The tools that are on, with their schemas.
    pub fn tools(&self) -> Vec<RawTool> {
        let mut tools = Vec::new();
        if self.fetch.is_some() {
            tools.push(tool(
                "fetch_url",
                "Fetch a web page over http(s) and return its readable text (HTML reduced to text).",
                "url",
                "The page's full address, starting with http:// or https://",
            ));
        }
        if self.search.is_some() {
            tools.push(tool(
                "web_search",
                "Search the web and return the top results, each with its title, address and a snippet.",
                "query",
                "What to search for, as words typed into a search engine",
            ));
        }
        if !self.roots.is_empty() {
            let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
            tools.push(tool(
                "read_file",
                &format!(
                    "Read a text file. Allowed directories: {}.",
                    roots.join(", ")
                ),
                "path",
                "The file's path: absolute, or relative to an allowed directory",
            ));
        }
        tools
    }

    /// Runs the built-in `name` with `arguments`, giving its text.
    pub async fn call(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<String, BuiltinError> {
        match (name, &self.fetch, &self.search) {
            ("fetch_url", Some(client), _) => {
                self.fetch_url(client, string(arguments, "url")?).await
            }
            ("web_search", _, Some(client)) => {
                self.web_search(client, string(arguments, "query")?).await
            }
            ("read_file", _, _) if !self.roots.is_empty() => {
                let path = PathBuf::from(string(arguments, "path")?);
                let (roots, max) = (self.roots.clone(), self.config.max_fetch_bytes);
                tokio::task::spawn_blocking(move || read_file(&roots, &path, max))
                    .await
                    .map_err(|e| BuiltinError::File(format!("read_file failed: {e}")))?
            }
            _ => Err(BuiltinError::Unknown(clean::message(name, 80))),
        }
    }

    /// `fetch_url`: the page's text, HTML reduced.
    async fn fetch_url(&self, client: &reqwest::Client, url: &str) -> Result<String, BuiltinError> {
        let allow = self.config.allow_private;
        let url = net::check_url(url, allow)?;
        let accept = "text/html, text/plain;q=0.9, application/json;q=0.8, */*;q=0.1";
        let page = net::get(client, url, allow, self.config.max_fetch_bytes, accept).await?;
        if !is_text(&page.content_type) {
            return Err(BuiltinError::NotText(format!(
                "{} is {}, not text",
                page.url,
                clean::message(&page.content_type, 80)
            )));
        }
        let body = String::from_utf8_lossy(&page.body);
        let mut text = if html::is_html(&page.content_type, &body) {
            html::to_text(&body)
        } else {
            body.into_owned()
        };
        if page.truncated {
            text.push_str(&format!("\n[page cut at {} bytes]", page.body.len()));
        }
        Ok(text)
    }

    /// `web_search`: the instance's top results as text.
    async fn web_search(
        &self,
        client: &reqwest::Client,
        query: &str,
    ) -> Result<String, BuiltinError> {
        let base = self
            .config
            .web_search
            .as_deref()
            .unwrap_or_default()
            .trim_end_matches('/');
        let mut url = net::check_url(&format!("{base}/search"), true)?;
        url.query_pairs_mut()
            .append_pair("q", query)
            .append_pair("format", "json");
        let page = net::get(
            client,
            url,
            true,
            self.config.max_fetch_bytes,
            "application/json",
        )
        .await?;
        let answer: Value = serde_json::from_slice(&page.body).map_err(|_| {
            BuiltinError::Search(
                "the search instance did not answer JSON (is `json` in its search formats?)".into(),
            )
        })?;
        let results = answer
            .get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                BuiltinError::Search("the search instance answered without `results`".into())
            })?;
        Ok(format_results(query, results))
    }
}

/// A built-in's declaration: one required string argument.
fn tool(name: &str, description: &str, arg: &str, arg_description: &str) -> RawTool {
    let schema = json!({
        "type": "object",
        "properties": { arg: { "type": "string", "description": arg_description } },
        "required": [arg],
        "additionalProperties": false,
    });
    let schema = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    RawTool {
        name: name.to_owned(),
        description: description.to_owned(),
        schema,
    }
}

/// The string argument `key`.
fn string<'a>(
    arguments: &'a Map<String, Value>,
    key: &'static str,
) -> Result<&'a str, BuiltinError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or(BuiltinError::Argument(key))
}

/// Whether a `Content-Type` is text the model can read (absent counts as text).
fn is_text(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or_default().trim();
    mime.is_empty()
        || mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime,
            "application/json" | "application/xml" | "application/javascript"
        )
}

/// Search results as numbered entries: title, address, snippet.
fn format_results(query: &str, results: &[Value]) -> String {
    let mut out = String::new();
    for (i, result) in results.iter().take(MAX_RESULTS).enumerate() {
        let field =
            |key: &str| clean::message(result.get(key).and_then(Value::as_str).unwrap_or(""), 500);
        out.push_str(&format!(
            "{}. {}\n   {}\n",
            i + 1,
            field("title"),
            field("url")
        ));
        let snippet = field("content");
        if !snippet.is_empty() {
            out.push_str(&format!("   {snippet}\n"));
        }
    }
    if out.is_empty() {
        out = format!("No results for {:?}.", clean::message(query, 200));
    }
    out
}

/// `read_file`: the text of `path`, which must resolve (symlinks followed) to a regular file
/// under one of `roots` (canonical); a path with `..` is refused outright; at most `max` bytes.
pub fn read_file(roots: &[PathBuf], path: &Path, max: usize) -> Result<String, BuiltinError> {
    let refuse = |why: &str| BuiltinError::File(format!("{}: {why}", path.display()));
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refuse("`..` is not allowed in the path"));
    }
    let candidates: Vec<PathBuf> = if path.is_absolute() {
        vec![path.to_path_buf()]
    } else {
        roots.iter().map(|root| root.join(path)).collect()
    };
    let found = candidates.iter().find_map(|c| c.canonicalize().ok());
    let Some(real) = found else {
        return Err(refuse("no such file"));
    };
    if !roots.iter().any(|root| real.starts_with(root)) {
        return Err(refuse("outside the allowed directories"));
    }
    if !real.metadata().is_ok_and(|m| m.is_file()) {
        return Err(refuse("not a regular file"));
    }
    let file = std::fs::File::open(&real).map_err(|e| refuse(&e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(&e.to_string()))?;
    let truncated = bytes.len() > max;
    bytes.truncate(max);
    if bytes.contains(&0) {
        return Err(refuse("a binary file, not text"));
    }
    let mut text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) if truncated && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|_| refuse("not UTF-8 text"))?
        }
        Err(_) => return Err(refuse("not UTF-8 text")),
    };
    if truncated {
        text.push_str(&format!("\n[file cut at {max} bytes]"));
    }
    Ok(text)
}
