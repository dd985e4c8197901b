//! The HTTP side of the remote engine: what the server is (llama-server or another
//! OpenAI-compatible server; its model, context and slots), a turn's streamed answer as
//! [`Piece`]s (reqwest streams the body, eventsource-stream frames the events), llama-server's
//! slot state, and the server's count of a conversation's tokens. Errors say what to do; the API
//! key travels only in the `Authorization` header and appears in no message.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};

use super::wire::{self, Piece, ServerKind, WireError};

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

/// What the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Its kind.
    pub kind: ServerKind,
    /// The model it serves that the tabs use.
    pub model: String,
    /// Tokens per conversation (a llama-server slot's context, vLLM's `max_model_len`), if said.
    pub context: Option<usize>,
    /// llama-server's slots (0 elsewhere).
    pub slots: usize,
    /// Whether its template has a thinking switch.
    pub thinking: bool,
}

/// An OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    first_byte: Duration,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8080`), with the API key `key`
    /// and its time-outs.
    pub fn new(
        base: &str,
        key: Option<String>,
        connect: Duration,
        first_byte: Duration,
    ) -> Result<Self, RemoteError> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect)
            .build()
            .map_err(|e| RemoteError::Unreachable {
                url: base.to_string(),
                why: e.to_string(),
            })?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
            first_byte,
        })
    }

    /// The server's address, for messages.
    pub fn url(&self) -> &str {
        &self.base
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
                let text = sent.text().await.unwrap_or_default();
                let message = serde_json::from_str::<Value>(&text)
                    .map(|v| wire::error_message(&v))
                    .unwrap_or_else(|_| wire::clip(&text));
                Err(RemoteError::Status {
                    url: self.base.clone(),
                    status,
                    message,
                })
            }
        }
    }

    async fn get_json(&self, path: &str) -> Result<Value, RemoteError> {
        let r = self.send(self.request(reqwest::Method::GET, path)).await?;
        self.json(r, path).await
    }

    /// The body of `r` (from `path`) as JSON.
    async fn json(&self, r: reqwest::Response, path: &str) -> Result<Value, RemoteError> {
        r.json().await.map_err(|e| RemoteError::Status {
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

    /// What the server is and serves; `model` is the model asked for (`None`: the first).
    pub async fn discover(&self, model: Option<&str>) -> Result<ServerInfo, RemoteError> {
        let models = self.get_json("/v1/models").await?;
        let list: Vec<&Value> = models
            .get("data")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let ids: Vec<&str> = list
            .iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .collect();
        let chosen = match model {
            Some(m) if ids.contains(&m) => m.to_string(),
            Some(m) => {
                return Err(RemoteError::NoSuchModel {
                    url: self.base.clone(),
                    model: m.to_string(),
                    served: if ids.is_empty() {
                        "nothing".into()
                    } else {
                        ids.join(", ")
                    },
                });
            }
            None => ids.first().map(|s| s.to_string()).unwrap_or_default(),
        };
        let entry = list
            .iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(chosen.as_str()));
        let max_model_len = entry
            .and_then(|m| m.get("max_model_len"))
            .and_then(Value::as_u64)
            .map(|n| n as usize);
        // llama-server says more at /props; other servers have none (an error is no answer).
        if let Ok(props) = self.get_json("/props").await
            && let Some(slots) = props.get("total_slots").and_then(Value::as_u64)
        {
            let template = props
                .get("chat_template")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Ok(ServerInfo {
                kind: ServerKind::LlamaServer,
                model: chosen,
                context: props
                    .pointer("/default_generation_settings/n_ctx")
                    .and_then(Value::as_u64)
                    .map(|n| n as usize),
                slots: slots as usize,
                thinking: template.contains("enable_thinking"),
            });
        }
        let lower = chosen.to_lowercase();
        Ok(ServerInfo {
            kind: ServerKind::OpenAi,
            thinking: lower.contains("gemma-4") || lower.contains("gemma4"),
            model: chosen,
            context: max_model_len,
            slots: 0,
        })
    }

    /// A turn's answer as it streams: the pieces of each event, until `[DONE]` or the end.
    pub async fn stream(
        &self,
        body: &Value,
    ) -> Result<impl Stream<Item = Result<Vec<Piece>, RemoteError>> + use<>, RemoteError> {
        let r = self
            .send(
                self.request(reqwest::Method::POST, "/v1/chat/completions")
                    .json(body),
            )
            .await?;
        let url = self.base.clone();
        Ok(r.bytes_stream()
            .eventsource()
            .map(move |event| match event {
                Ok(e) => wire::parse(&e.data).map_err(|error| RemoteError::Wire {
                    url: url.clone(),
                    error,
                }),
                Err(e) => Err(RemoteError::Dropped {
                    url: url.clone(),
                    why: e.to_string(),
                }),
            }))
    }

    /// Whether llama-server's slot `slot` is idle (`None`: the server does not say).
    pub async fn slot_idle(&self, slot: usize) -> Option<bool> {
        let slots = self.get_json("/slots").await.ok()?;
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
    /// `/tokenize` with messages.
    pub async fn count(&self, info: &ServerInfo, messages: &[Value]) -> Option<usize> {
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
            ServerKind::OpenAi => {
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
                    .map(|n| n as usize)
                    .or_else(|| Some(r.get("tokens")?.as_array()?.len()))
            }
        }
    }
}

/// A reqwest error's innermost cause, in words (reqwest's own text names only the request).
fn cause(e: &reqwest::Error) -> String {
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
