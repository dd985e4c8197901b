//! What goes over the wire to an OpenAI-compatible server: the body of a streamed
//! `POST /v1/chat/completions` for a tab's turn (its tools as OpenAI `tools`, earlier tool
//! round-trips as assistant `tool_calls` and `tool` messages), and what one server-sent event's
//! data says (answer and thought deltas, `tool_calls` deltas, the finish reason, usage and
//! llama-server's timings and prompt progress, or an error). Pure functions: the HTTP and SSE
//! framing are the crates' work, assembling calls is [`super::calls`]'.

use serde::Deserialize;
use serde_json::{Value, json};

use super::calls::{CallDelta, call_deltas};
use super::limits::MAX_COUNT;
use crate::protocol::Exchange;
use gemma_model::sampling::SamplingParams;

/// Which server answers: what it takes beyond the OpenAI API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// llama.cpp's llama-server: slots (`id_slot`), `cache_prompt`, prompt progress, timings.
    LlamaServer,
    /// vLLM, SGLang or another OpenAI-compatible server: its prefix cache is automatic.
    OpenAi,
    /// `gemma-chat serve` (its `/v1/models` entry is `owned_by: "gemma-chat"`): warm slots of its
    /// own, and a thought budget as llama-server takes it.
    GemmaChat,
}

impl ServerKind {
    /// Whether the server takes a thought budget (`reasoning_budget_tokens`).
    pub fn takes_thought_budget(self) -> bool {
        matches!(self, ServerKind::LlamaServer | ServerKind::GemmaChat)
    }
}

/// One turn's request: the tab's whole conversation, re-sent byte-identically each turn so the
/// server's prefix cache holds.
#[derive(Debug, Clone)]
pub struct TurnRequest<'a> {
    /// The model name the server knows.
    pub model: &'a str,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// Earlier exchanges, answers exactly as received (thoughts left out, as Gemma asks).
    pub history: &'a [Exchange],
    /// The pictures of each earlier exchange's message, as data URLs (fewer: none).
    pub pictures: &'a [Vec<String>],
    /// Each earlier exchange's assistant-side messages when it called tools (fewer, or
    /// empty: its answer as one assistant message).
    pub replies: &'a [Vec<Value>],
    /// The tools declared (OpenAI function declarations; `None`: no `tools`).
    pub tools: Option<&'a Value>,
    /// `auto`, `required` or `none` (sent with `tools` only).
    pub tool_choice: &'a str,
    /// The new user message, and its pictures.
    pub user: (&'a str, &'a [String]),
    /// Sampling.
    pub sampling: &'a SamplingParams,
    /// Most answer tokens.
    pub max_tokens: usize,
    /// Stop strings.
    pub stop: &'a [String],
    /// Gemma 4 thinking.
    pub thinking: bool,
    /// Most thought tokens in the turn, and the text written before a forced close (sent to
    /// llama-server only; `None`: unbounded, or the server's own).
    pub thought_budget: (Option<usize>, Option<&'a str>),
    /// The llama-server slot the tab is pinned to.
    pub slot: Option<usize>,
    /// The server's kind.
    pub kind: ServerKind,
}

/// The messages of a conversation as the chat API takes them; `pictures[i]` go with the `i`th
/// exchange's message (as `image_url` parts before its text, as Google advises), `replies[i]`
/// (when not empty) stand for its answer: the assistant messages with their `tool_calls`, the
/// `tool` messages, and the last answer text.
pub fn messages(
    system: Option<&str>,
    history: &[Exchange],
    pictures: &[Vec<String>],
    replies: &[Vec<Value>],
    user: Option<(&str, &[String])>,
) -> Vec<Value> {
    let mut m = Vec::with_capacity(history.len() * 2 + 2);
    if let Some(s) = system {
        m.push(json!({"role": "system", "content": s}));
    }
    for (i, e) in history.iter().enumerate() {
        let urls = pictures.get(i).map_or(&[][..], Vec::as_slice);
        m.push(json!({"role": "user", "content": content(&e.user, urls)}));
        match replies.get(i).filter(|r| !r.is_empty()) {
            Some(r) => m.extend(r.iter().cloned()),
            None => m.push(json!({"role": "assistant", "content": e.answer})),
        }
    }
    if let Some((text, urls)) = user {
        m.push(json!({"role": "user", "content": content(text, urls)}));
    }
    m
}

/// A user message's content: its text, or its pictures and recordings then its text.
fn content(text: &str, urls: &[String]) -> Value {
    if urls.is_empty() {
        return json!(text);
    }
    let mut parts: Vec<Value> = urls
        .iter()
        .map(|u| match u.strip_prefix(WAV_URL) {
            Some(b64) => {
                json!({"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}})
            }
            None => json!({"type": "image_url", "image_url": {"url": u}}),
        })
        .collect();
    parts.push(json!({"type": "text", "text": text}));
    Value::Array(parts)
}

/// How a recording's `data:` URL starts; its message part is OpenAI's `input_audio`.
const WAV_URL: &str = "data:audio/wav;base64,";

/// An attachment as a `data:` URL: a picture as [`data_url`] makes it, a recording as a
/// [`WAV_URL`] (decoded and resampled to 16 kHz mono here, so that every server gets WAV).
pub fn attachment_url(a: &crate::protocol::Attachment) -> Result<String, String> {
    use base64::Engine;
    match a.kind {
        crate::protocol::MediaKind::Image => data_url(&a.path),
        crate::protocol::MediaKind::Audio => {
            let clip = gemma_media::audio::Clip::open(&a.path).map_err(|e| e.to_string())?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(clip.to_wav());
            Ok(format!("{WAV_URL}{b64}"))
        }
    }
}

/// A picture file as a `data:` URL, checked first as the local engine checks it (a picture
/// format gemma-chat reads, within the size limits).
pub fn data_url(path: &std::path::Path) -> Result<String, String> {
    use base64::Engine;
    let what = path.display().to_string();
    let bytes = gemma_files::read_limited(path, gemma_media::picture::MAX_FILE)
        .map_err(|e| format!("{what}: {e}"))?;
    let (_, format) =
        gemma_media::Picture::probe_bytes(&bytes, &what).map_err(|e| e.to_string())?;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(format!("data:{};base64,{b64}", format.to_mime_type()))
}

/// The JSON body of a turn's request.
pub fn body(r: &TurnRequest) -> Value {
    let s = r.sampling;
    let mut b = json!({
        "model": r.model,
        "messages": messages(r.system, r.history, r.pictures, r.replies, Some(r.user)),
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": r.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "min_p": s.min_p,
        "seed": s.seed,
        "chat_template_kwargs": {"enable_thinking": r.thinking},
    });
    if !r.stop.is_empty() {
        b["stop"] = json!(r.stop);
    }
    if let Some(tools) = r.tools {
        b["tools"] = tools.clone();
        b["tool_choice"] = json!(r.tool_choice);
    }
    if r.kind.takes_thought_budget()
        && let (true, (Some(n), message)) = (r.thinking, r.thought_budget)
    {
        // llama.cpp's server reads `reasoning_budget_tokens`, else `thinking_budget_tokens`
        // (tools/server/server-common.cpp), and the message before its forced close;
        // gemma-chat serve the first two (its engine writes its own message).
        b["reasoning_budget_tokens"] = json!(n);
        b["thinking_budget_tokens"] = json!(n);
        if let Some(m) = message {
            b["reasoning_budget_message"] = json!(m);
        }
    }
    if r.kind == ServerKind::LlamaServer {
        b["cache_prompt"] = json!(true);
        b["return_progress"] = json!(true);
        if let Some(slot) = r.slot {
            b["id_slot"] = json!(slot);
        }
    }
    b
}

/// What the server counted for a turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens in all.
    pub prompt_tokens: usize,
    /// Answer tokens.
    pub completion_tokens: usize,
    /// Prompt tokens its cache held (`prompt_tokens_details.cached_tokens`, or llama-server's
    /// `timings.cache_n`).
    pub cached_tokens: Option<usize>,
    /// Prompt tokens per second (llama-server's timings).
    pub prompt_per_second: Option<f64>,
    /// Answer tokens per second (llama-server's timings).
    pub predicted_per_second: Option<f64>,
}

/// Why the server ended the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn, or a stop string was found.
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The model called tools.
    ToolCalls,
    /// Anything else the server says (e.g. `content_filter`).
    Other,
}

/// What one event's data says, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Thought text (`reasoning_content` or `reasoning`).
    Thought(String),
    /// Answer text.
    Answer(String),
    /// A piece of a tool call.
    ToolCall(CallDelta),
    /// Prompt processing (llama-server's `prompt_progress`).
    Progress {
        /// Prompt tokens in all.
        total: usize,
        /// Tokens its cache held.
        cache: usize,
        /// Tokens processed so far (the cached ones included).
        processed: usize,
    },
    /// The answer ended.
    Finish(Finish),
    /// The turn's counts.
    Usage(Usage),
    /// Usage numbers that are not counts (ignored; the note says which).
    BadUsage(String),
    /// The stream ended (`[DONE]`).
    Done,
}

/// An event that is not what the API says it is, or an error object sent mid-stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The server sent an error object.
    #[error("{0}")]
    Server(String),
    /// The data is not a chunk of the chat API.
    #[error("the server sent something that is not a chat completion chunk: {0}")]
    Malformed(String),
    /// The event stream itself is broken (a line too long, bytes that are not UTF-8).
    #[error(transparent)]
    Framing(#[from] super::sse::SseError),
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<Value>,
    timings: Option<Value>,
    prompt_progress: Option<Value>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<Value>,
}

/// The count at `path` in `v`: absent is `Ok(None)`, anything but a whole number up to
/// [`MAX_COUNT`] is an error naming it.
fn count(v: &Value, path: &str) -> Result<Option<usize>, String> {
    match v.pointer(path) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .filter(|n| *n <= MAX_COUNT)
            .map(|n| Some(n as usize))
            .ok_or_else(|| {
                format!(
                    "{} = {}",
                    path.trim_start_matches('/'),
                    clip(&n.to_string())
                )
            }),
    }
}

/// A rate, if it is one.
fn rate(v: Option<&Value>, key: &str) -> Option<f64> {
    v?.get(key)?.as_f64().filter(|r| r.is_finite() && *r >= 0.0)
}

/// The usage object's counts, or a note on what is wrong with them.
fn usage(u: &Value, timings: Option<&Value>) -> Piece {
    let read = || -> Result<Usage, String> {
        let cached = match count(u, "/prompt_tokens_details/cached_tokens")? {
            Some(c) => Some(c),
            None => match timings {
                Some(t) => count(t, "/cache_n")?,
                None => None,
            },
        };
        Ok(Usage {
            prompt_tokens: count(u, "/prompt_tokens")?.unwrap_or(0),
            completion_tokens: count(u, "/completion_tokens")?.unwrap_or(0),
            cached_tokens: cached,
            prompt_per_second: rate(timings, "prompt_per_second"),
            predicted_per_second: rate(timings, "predicted_per_second"),
        })
    };
    match read() {
        Ok(u) => Piece::Usage(u),
        Err(what) => Piece::BadUsage(format!(
            "the server's usage numbers are not counts ({what}); its token counts are ignored for this turn"
        )),
    }
}

/// The pieces of one event's `data`.
pub fn parse(data: &str) -> Result<Vec<Piece>, WireError> {
    let data = data.trim();
    if data == "[DONE]" {
        return Ok(vec![Piece::Done]);
    }
    let chunk: Chunk = serde_json::from_str(data)
        .map_err(|e| WireError::Malformed(format!("{e}: {}", clip(data))))?;
    if let Some(e) = chunk.error {
        return Err(WireError::Server(error_message(&e)));
    }
    let mut out = Vec::new();
    if let Some(p) = chunk.prompt_progress
        && let (Ok(Some(total)), Ok(Some(cache)), Ok(Some(processed))) = (
            count(&p, "/total"),
            count(&p, "/cache"),
            count(&p, "/processed"),
        )
    {
        out.push(Piece::Progress {
            total,
            cache,
            processed,
        });
    }
    for c in chunk.choices {
        if let Some(t) = c.delta.reasoning_content.or(c.delta.reasoning)
            && !t.is_empty()
        {
            out.push(Piece::Thought(t));
        }
        if let Some(t) = c.delta.content.filter(|t| !t.is_empty()) {
            out.push(Piece::Answer(t));
        }
        if let Some(calls) = &c.delta.tool_calls {
            out.extend(call_deltas(calls).into_iter().map(Piece::ToolCall));
        }
        if let Some(f) = c.finish_reason {
            out.push(Piece::Finish(match f.as_str() {
                "stop" => Finish::Stop,
                "length" => Finish::Length,
                "tool_calls" | "function_call" => Finish::ToolCalls,
                _ => Finish::Other,
            }));
        }
    }
    if let Some(u) = chunk.usage.filter(|u| !u.is_null()) {
        out.push(usage(&u, chunk.timings.as_ref()));
    }
    Ok(out)
}

/// The message of an error object (`{"error": {"message": …}}` or `{"error": "…"}`).
pub fn error_message(e: &Value) -> String {
    let e = e.get("error").unwrap_or(e);
    e.get("message")
        .and_then(Value::as_str)
        .or_else(|| e.as_str())
        .map(clip)
        .unwrap_or_else(|| clip(&e.to_string()))
}

/// At most 200 characters of `s` on one line, for messages.
pub fn clip(s: &str) -> String {
    crate::protocol::text::short(s, 200)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
