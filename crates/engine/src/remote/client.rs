//! The HTTP side of the remote engine: requests and their bounded bodies, llama-server's slot
//! state, and the server's count of a conversation's tokens; what the server is, is
//! [`super::info`]'s, a turn's streamed answer [`super::answer`]'s.
//! Everything a server sends is bounded: bodies by size ([`MAX_BODY`], an error's first
//! [`MAX_ERROR_BODY`] bytes), the wait for them by [`RemoteOptions::idle_timeout`], lists by
//! length, numbers by plausible ranges. Errors say what to do; the API key travels only in the
//! `Authorization` header, and [`Client::scrub`] takes it (and terminal controls) out of whatever
//! the server says before it is shown or saved.

use std::time::Duration;

use serde_json::{Value, json};

use super::RemoteOptions;
use super::answer::{Answer, Budget, MIN_SECRET, REDACTED};
use super::info::{MAX_CONTEXT, ServerInfo};
pub use super::limits::{MAX_BODY, MAX_ERROR_BODY};
use super::wire::{self, ServerKind, WireError};

/// A failed exchange with the server, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// No connection (refused, no route, DNS, TLS).
    #[error(
        "cannot reach the server at {url} ({why}); is it running? Start it, or set [engine] url"
    )]
    Unreachable {
        /// The server.
        url: String,
        /// The cause.
        why: String,
    },
    /// The API key cannot go in an HTTP header: a control character (a trailing newline or
    /// carriage return, most often) or a character outside visible ASCII. No try can work.
    #[error(
        "the API key holds {what}, which an HTTP header cannot carry; fix the environment variable [engine] api_key_env names (a trailing newline or CR?)"
    )]
    BadKey {
        /// What it holds, without the key.
        what: String,
    },
    /// The server wants a (different) API key.
    #[error(
        "the server at {url} refused the API key (HTTP {status}); set [engine] api_key_env to the name of the environment variable that holds it"
    )]
    Unauthorized {
        /// The server.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// The server does not serve the model asked for.
    #[error(
        "the server at {url} does not serve the model {model:?}; it serves: {served}. Set [engine] model to one of them"
    )]
    NoSuchModel {
        /// The server.
        url: String,
        /// The model asked for.
        model: String,
        /// What it serves.
        served: String,
    },
    /// Any other refusal, in the server's words (e.g. a prompt over the context).
    #[error("the server at {url} answered HTTP {status}: {message}")]
    Status {
        /// The server.
        url: String,
        /// The status code.
        status: u16,
        /// Its message.
        message: String,
    },
    /// Nothing came back in time.
    #[error(
        "the server at {url} sent nothing for {secs} s; it may be busy or stuck (the time-out is [engine] first_byte_timeout_s)"
    )]
    Timeout {
        /// The server.
        url: String,
        /// The time-out.
        secs: u64,
    },
    /// The answer (or a body) started, then nothing more came in time.
    #[error(
        "the server at {url} went silent for {secs} s mid-answer; what came is kept (the time-out is [engine] idle_timeout_s)"
    )]
    Stalled {
        /// The server.
        url: String,
        /// The time-out.
        secs: u64,
    },
    /// The server sent more than an answer (or a body) can be.
    #[error("the server at {url} sent {what}; it was cut off there, what came before is kept")]
    TooMuch {
        /// The server.
        url: String,
        /// What was too much.
        what: String,
    },
    /// The connection ended mid-answer.
    #[error(
        "the connection to {url} was lost mid-answer ({why}); what came is kept. Send again when the server is back"
    )]
    Dropped {
        /// The server.
        url: String,
        /// The cause.
        why: String,
    },
    /// The stream said something wrong.
    #[error("the server at {url}: {error}")]
    Wire {
        /// The server.
        url: String,
        /// What it said.
        error: WireError,
    },
}

/// An OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    first_byte: Duration,
    idle: Duration,
}

impl Client {
    /// A client for the server `options` name, with its API key and time-outs.
    pub fn new(options: &RemoteOptions) -> Result<Self, RemoteError> {
        let base = options.url.trim_end_matches('/').to_string();
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| RemoteError::Unreachable {
                url: base.clone(),
                why: e.to_string(),
            })?;
        if let Some(key) = &options.api_key
            && let Some(c) = key.chars().find(|c| !(' '..='~').contains(c))
        {
            let what = match c {
                '\r' => "a carriage return".to_string(),
                '\n' => "a newline".to_string(),
                c if c.is_control() => format!("the control character U+{:04X}", c as u32),
                c => format!("the character U+{:04X}", c as u32),
            };
            return Err(RemoteError::BadKey { what });
        }
        Ok(Self {
            http,
            base,
            key: options.api_key.clone().filter(|k| !k.is_empty()),
            first_byte: options.first_byte_timeout,
            idle: options.idle_timeout,
        })
    }

    /// The server's address, for messages.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// How long a started answer may go without news.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// The API key as a secret to take out of what the server says: `None` without a key or
    /// with one shorter than [`MIN_SECRET`] (a word that short is no key, and taking it out
    /// would mangle answers).
    pub fn secret(&self) -> Option<&str> {
        self.key.as_deref().filter(|k| k.len() >= MIN_SECRET)
    }

    /// What a server said, fit to show and to save: no terminal controls, the API key replaced.
    pub fn scrub(&self, text: &str) -> String {
        let clean = crate::protocol::text::printable(text);
        match self.secret() {
            Some(k) if clean.contains(k) => clean.replace(k, REDACTED),
            _ => clean.into_owned(),
        }
    }

    pub(super) fn stalled(&self) -> RemoteError {
        RemoteError::Stalled {
            url: self.base.clone(),
            secs: self.idle.as_secs(),
        }
    }

    pub(super) fn dropped(&self, e: &reqwest::Error) -> RemoteError {
        RemoteError::Dropped {
            url: self.base.clone(),
            why: cause(e),
        }
    }

    /// The body of `r`, read within the idle time-out a piece: at most `limit` bytes, the rest
    /// unread (`cut`: kept short; else an error).
    async fn body(
        &self,
        mut r: reqwest::Response,
        limit: usize,
        what: &str,
        cut: bool,
    ) -> Result<Vec<u8>, RemoteError> {
        let too_much = || RemoteError::TooMuch {
            url: self.base.clone(),
            what: format!("{what} over {} KiB", limit >> 10),
        };
        if !cut && r.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_much());
        }
        let mut buf = Vec::new();
        loop {
            let chunk = tokio::time::timeout(self.idle, r.chunk())
                .await
                .map_err(|_| self.stalled())?
                .map_err(|e| self.dropped(&e))?;
            let Some(chunk) = chunk else {
                return Ok(buf);
            };
            if buf.len() + chunk.len() > limit {
                if !cut {
                    return Err(too_much());
                }
                buf.extend_from_slice(&chunk[..limit - buf.len()]);
                return Ok(buf);
            }
            buf.extend_from_slice(&chunk);
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// Sends `r` and waits for the answer's head within the first-byte time-out.
    async fn send(&self, r: reqwest::RequestBuilder) -> Result<reqwest::Response, RemoteError> {
        let sent = tokio::time::timeout(self.first_byte, r.send())
            .await
            .map_err(|_| RemoteError::Timeout {
                url: self.base.clone(),
                secs: self.first_byte.as_secs(),
            })?
            .map_err(|e| RemoteError::Unreachable {
                url: self.base.clone(),
                why: cause(&e),
            })?;
        let status = sent.status().as_u16();
        match status {
            200..=299 => Ok(sent),
            401 | 403 => Err(RemoteError::Unauthorized {
                url: self.base.clone(),
                status,
            }),
            _ => {
                let bytes = self
                    .body(sent, MAX_ERROR_BODY, "an error", true)
                    .await
                    .unwrap_or_default();
                let text = String::from_utf8_lossy(&bytes);
                let message = serde_json::from_str::<Value>(&text)
                    .map(|v| wire::error_message(&v))
                    .unwrap_or_else(|_| wire::clip(&text));
                Err(RemoteError::Status {
                    url: self.base.clone(),
                    status,
                    message: self.scrub(&message),
                })
            }
        }
    }

    pub(super) async fn get_json(&self, path: &str) -> Result<Value, RemoteError> {
        let r = self.send(self.request(reqwest::Method::GET, path)).await?;
        self.json(r, path).await
    }

    /// The body of `r` (from `path`) as JSON, at most [`MAX_BODY`] bytes.
    async fn json(&self, r: reqwest::Response, path: &str) -> Result<Value, RemoteError> {
        let bytes = self
            .body(r, MAX_BODY, &format!("an answer to {path}"), false)
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| RemoteError::Status {
            url: self.base.clone(),
            status: 200,
            message: format!("{path} is not JSON: {e}"),
        })
    }

    async fn post_json(&self, path: &str, body: &Value) -> Result<Value, RemoteError> {
        let r = self
            .send(self.request(reqwest::Method::POST, path).json(body))
            .await?;
        self.json(r, path).await
    }

    /// A turn's answer as it streams, within `budget`.
    pub async fn stream(&self, body: &Value, budget: Budget) -> Result<Answer, RemoteError> {
        let r = self
            .send(
                self.request(reqwest::Method::POST, "/v1/chat/completions")
                    .json(body),
            )
            .await?;
        Ok(Answer::new(self.clone(), r, budget))
    }

    /// Whether llama-server's slot `slot` is idle (`None`: the server does not say within the
    /// idle time-out).
    pub async fn slot_idle(&self, slot: usize) -> Option<bool> {
        let slots = tokio::time::timeout(self.idle, self.get_json("/slots"))
            .await
            .ok()?
            .ok()?;
        slots
            .as_array()?
            .iter()
            .find(|s| s.get("id").and_then(Value::as_u64) == Some(slot as u64))?
            .get("is_processing")
            .and_then(Value::as_bool)
            .map(|busy| !busy)
    }

    /// The server's count of a conversation's tokens (the template applied, no generation
    /// prompt), where it can count: llama-server's `/apply-template` + `/tokenize`, vLLM's
    /// `/tokenize` with messages. A count is a courtesy: a server that does not give it within
    /// the idle time-out gives none, and nothing waits longer.
    pub async fn count(&self, info: &ServerInfo, messages: &[Value]) -> Option<usize> {
        tokio::time::timeout(self.idle, self.count_now(info, messages))
            .await
            .ok()?
    }

    async fn count_now(&self, info: &ServerInfo, messages: &[Value]) -> Option<usize> {
        match info.kind {
            ServerKind::LlamaServer => {
                let t = self
                    .post_json("/apply-template", &json!({ "messages": messages }))
                    .await
                    .ok()?;
                let prompt = t.get("prompt")?.as_str()?;
                let ids = self
                    .post_json(
                        "/tokenize",
                        &json!({"content": prompt, "add_special": true, "parse_special": true}),
                    )
                    .await
                    .ok()?;
                Some(ids.get("tokens")?.as_array()?.len())
            }
            ServerKind::OpenAi | ServerKind::GemmaChat => {
                let r = self
                    .post_json(
                        "/tokenize",
                        &json!({"model": info.model, "messages": messages,
                                "add_generation_prompt": false}),
                    )
                    .await
                    .ok()?;
                r.get("count")
                    .and_then(Value::as_u64)
                    .map(|n| n.min(MAX_CONTEXT) as usize)
                    .or_else(|| Some(r.get("tokens")?.as_array()?.len()))
            }
        }
    }
}

/// A reqwest error's innermost cause, in words (reqwest's own text names only the request).
pub(super) fn cause(e: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut last = e.to_string();
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    if e.is_timeout() {
        "connect time-out ([engine] connect_timeout_s)".into()
    } else {
        last
    }
}
