//! What a chat completions request may say, checked field by field ([`parse`]): every error
//! names the field at fault; what the API has and gemma-chat does not do yet (log
//! probabilities, penalties, `n > 1`) is refused by name, never ignored. Messages become the conversation the engine renders ([`crate::convo`]), tools the
//! ones the client answers itself ([`crate::calls`]).

use serde_json::{Map, Value};

use crate::calls::{JsonFormat, Tools, response_format, tools};
pub(crate) use crate::convo::Exchange;
use crate::convo::conversation;
use crate::error::ApiError;
use gemma_protocol::MediaKind;

/// A picture or recording sent in a message, decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Media {
    pub bytes: Vec<u8>,
    /// The bytes' SHA-256 in hex: the file's name and the message key's part, hashed once.
    pub digest: String,
    pub kind: MediaKind,
    /// The file's extension (`png`, `wav`…).
    pub ext: &'static str,
    /// A picture's soft tokens at most (`detail`: low 70, auto 280, high 1120).
    pub tokens: usize,
    /// A picture still to be fetched: its http(s) URL and the field that named it (its bytes
    /// come with [`Media::fetched`]).
    pub url: Option<(String, String)>,
}

impl Media {
    pub fn new(bytes: Vec<u8>, kind: MediaKind, ext: &'static str, tokens: usize) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Self {
            bytes,
            digest,
            kind,
            ext,
            tokens,
            url: None,
        }
    }

    /// A picture at `url` (named by `field`), to be fetched before the turn.
    pub fn pending(url: &str, field: &str, tokens: usize) -> Self {
        Self {
            url: Some((url.to_string(), field.to_string())),
            ..Self::new(Vec::new(), MediaKind::Image, "", tokens)
        }
    }

    /// The picture fetched from its URL: `bytes`, which must be a PNG, JPEG, WebP or GIF.
    pub fn fetched(&self, bytes: Vec<u8>) -> Result<Self, ApiError> {
        let field = self.url.as_ref().map_or("", |(_, f)| f.as_str());
        let ext = sniff(&bytes).ok_or_else(|| {
            ApiError::invalid(
                field,
                "the URL did not give a PNG, JPEG, WebP or GIF picture",
            )
        })?;
        Ok(Self::new(bytes, MediaKind::Image, ext, self.tokens))
    }
}

/// A picture's format from its first bytes.
fn sniff(b: &[u8]) -> Option<&'static str> {
    match b {
        [0x89, b'P', b'N', b'G', ..] => Some("png"),
        [0xFF, 0xD8, 0xFF, ..] => Some("jpg"),
        [b'G', b'I', b'F', b'8', ..] => Some("gif"),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some("webp"),
        _ => None,
    }
}

/// One message after merging neighbours of the same role.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Message {
    pub text: String,
    pub media: Vec<Media>,
}

/// `reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effort {
    None,
    Low,
    Medium,
    High,
}

/// A request, checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ChatRequest {
    pub stream: bool,
    pub include_usage: bool,
    pub system: Option<String>,
    pub history: Vec<Exchange>,
    /// The user's message to answer (empty when the request `continues`).
    pub last: Message,
    /// The last message is a tool's result: the model answers on from the last exchange.
    pub continues: bool,
    /// The tools the client declares, and what it asks of them.
    pub tools: Tools,
    /// `response_format` asks for JSON.
    pub json: Option<JsonFormat>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub effort: Option<Effort>,
    /// `chat_template_kwargs.enable_thinking` (llama-server's and vLLM's switch).
    pub enable_thinking: Option<bool>,
    /// `reasoning_budget_tokens` (or `thinking_budget_tokens`): most thought tokens.
    pub thought_budget: Option<usize>,
}

/// The most stop strings a request may set.
const MAX_STOP: usize = 16;

/// Parses and checks a request body; `max_media` bounds its pictures and recordings, and
/// `fetch` says whether http(s) picture URLs are taken (fetched later, [`Media::pending`]).
pub(crate) fn parse(body: &[u8], max_media: usize, fetch: bool) -> Result<ChatRequest, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("body", format!("the body is not valid JSON: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| ApiError::invalid("body", "the body must be a JSON object"))?;
    refuse_unsupported(o)?;
    let mut r = ChatRequest {
        stream: flag(o, "stream")?.unwrap_or(false),
        tools: tools(o)?,
        json: response_format(o)?,
        ..Default::default()
    };
    if let Some(so) = o.get("stream_options").filter(|v| !v.is_null()) {
        let so = so
            .as_object()
            .ok_or_else(|| ApiError::invalid("stream_options", "must be an object"))?;
        r.include_usage = flag(so, "include_usage")?.unwrap_or(false);
    }
    sampling(o, &mut r)?;
    let messages = o
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("messages", "`messages` must be an array of messages"))?;
    conversation(messages, &mut r, fetch)?;
    let media = r.last.media.len() + r.history.iter().map(|e| e.user.media.len()).sum::<usize>();
    if media > max_media {
        return Err(ApiError::invalid(
            "messages",
            format!("{media} pictures and recordings: at most {max_media} in one request"),
        ));
    }
    Ok(r)
}

/// The API's fields gemma-chat serve does not honour yet, refused when they ask for anything.
fn refuse_unsupported(o: &Map<String, Value>) -> Result<(), ApiError> {
    let set = |k: &str| o.get(k).filter(|v| !v.is_null());
    if let Some(n) = set("n")
        && n.as_u64() != Some(1)
    {
        return Err(ApiError::invalid(
            "n",
            "only n = 1 is served: one answer per request",
        ));
    }
    if set("logprobs").is_some_and(|v| v.as_bool() != Some(false)) {
        return Err(ApiError::invalid(
            "logprobs",
            "log probabilities are not served",
        ));
    }
    for k in ["presence_penalty", "frequency_penalty"] {
        if set(k).is_some_and(|v| v.as_f64() != Some(0.0)) {
            return Err(ApiError::invalid(
                k,
                "penalties are not served: leave it at 0",
            ));
        }
    }
    if set("logit_bias").is_some_and(|v| v.as_object().is_none_or(|m| !m.is_empty())) {
        return Err(ApiError::invalid(
            "logit_bias",
            "logit biases are not served",
        ));
    }
    Ok(())
}

/// A boolean field, if set.
fn flag(o: &Map<String, Value>, k: &str) -> Result<Option<bool>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid(k, format!("`{k}` must be true or false"))),
    }
}

/// A number field in `range`, if set.
fn number(o: &Map<String, Value>, k: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                k,
                format!("`{k}` must be a number from {lo} to {hi}"),
            )),
        },
    }
}

/// A whole-number field of at least `lo`, if set.
fn whole(o: &Map<String, Value>, k: &str, lo: u64) -> Result<Option<u64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(x) if x >= lo => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                k,
                format!("`{k}` must be a whole number of at least {lo}"),
            )),
        },
    }
}

fn sampling(o: &Map<String, Value>, r: &mut ChatRequest) -> Result<(), ApiError> {
    r.temperature = number(o, "temperature", 0.0, 2.0)?.map(|x| x as f32);
    r.top_p = number(o, "top_p", 0.0, 1.0)?.map(|x| x as f32);
    if r.top_p == Some(0.0) {
        return Err(ApiError::invalid("top_p", "`top_p` must be above 0"));
    }
    r.min_p = number(o, "min_p", 0.0, 1.0)?.map(|x| x as f32);
    r.top_k = whole(o, "top_k", 0)?.map(|x| x as usize);
    r.seed = match o.get("seed") {
        None | Some(Value::Null) => None,
        // Any whole number; a negative one keeps its bits.
        Some(v) => Some(
            v.as_u64()
                .or_else(|| v.as_i64().map(|s| s as u64))
                .ok_or_else(|| ApiError::invalid("seed", "`seed` must be a whole number"))?,
        ),
    };
    let most = whole(o, "max_completion_tokens", 1)?.or(whole(o, "max_tokens", 1)?);
    r.max_tokens = most.map(|x| x.min(u32::MAX as u64) as usize);
    r.stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .filter(|v| v.len() <= MAX_STOP && v.iter().all(|s| !s.is_empty()))
            .ok_or_else(|| {
                ApiError::invalid("stop", format!("at most {MAX_STOP} non-empty strings"))
            })?,
        Some(_) => return Err(ApiError::invalid("stop", "a string or an array of strings")),
    };
    if let Some(kw) = o.get("chat_template_kwargs").filter(|v| !v.is_null()) {
        let kw = kw
            .as_object()
            .ok_or_else(|| ApiError::invalid("chat_template_kwargs", "must be an object"))?;
        r.enable_thinking = flag(kw, "enable_thinking").map_err(|e| ApiError {
            param: Some("chat_template_kwargs.enable_thinking".into()),
            ..e
        })?;
    }
    r.thought_budget = whole(o, "reasoning_budget_tokens", 0)?
        .or(whole(o, "thinking_budget_tokens", 0)?)
        .map(|n| n.min(u32::MAX as u64) as usize);
    r.effort = match o.get("reasoning_effort") {
        None | Some(Value::Null) => None,
        Some(v) => Some(match v.as_str() {
            Some("none" | "minimal") => Effort::None,
            Some("low") => Effort::Low,
            Some("medium") => Effort::Medium,
            Some("high") => Effort::High,
            _ => {
                return Err(ApiError::invalid(
                    "reasoning_effort",
                    "one of none, minimal, low, medium, high",
                ));
            }
        }),
    };
    Ok(())
}

pub(crate) fn join(prev: &mut Message, next: Message) {
    if !prev.text.is_empty() && !next.text.is_empty() {
        prev.text.push_str("\n\n");
    }
    prev.text.push_str(&next.text);
    prev.media.extend(next.media);
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
