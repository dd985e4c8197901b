//! What the server is: llama-server (with its slots and its template's thinking switch),
//! `gemma-chat serve` (it says whether its model thinks), or another OpenAI-compatible server;
//! the model the tabs use, and its context, read from `/v1/models` and `/props`. Counts the
//! server states are believed only within plausible ranges, and the names it lists reach
//! messages clipped and cleaned.

use serde_json::Value;

use super::client::{Client, RemoteError};
pub use super::limits::{MAX_CONTEXT, MAX_NAMED, MAX_SLOTS};
use super::wire::{self, ServerKind};

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

impl Client {
    /// What the server is and serves; `model` is the model asked for (`None`: the first).
    pub async fn discover(&self, model: Option<&str>) -> Result<ServerInfo, RemoteError> {
        let models = self.get_json("/v1/models").await?;
        let list: &[Value] = models
            .get("data")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let id = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_string);
        let entry = match model {
            Some(m) => list.iter().find(|e| id(e).as_deref() == Some(m)),
            None => list.iter().find(|e| id(e).is_some()),
        };
        let Some(entry) = entry else {
            let ids: Vec<String> = list.iter().filter_map(id).collect();
            let mut served: Vec<String> = ids
                .iter()
                .take(MAX_NAMED)
                .map(|i| format!("{:?}", wire::clip(&self.scrub(i))))
                .collect();
            if ids.len() > MAX_NAMED {
                served.push(format!("and {} more", ids.len() - MAX_NAMED));
            }
            return Err(RemoteError::NoSuchModel {
                url: self.url().to_string(),
                model: model.map_or_else(|| "(any)".into(), |m| wire::clip(&self.scrub(m))),
                served: if served.is_empty() {
                    "nothing".into()
                } else {
                    served.join(", ")
                },
            });
        };
        let chosen = id(entry).unwrap_or_default();
        let max_model_len = plausible(entry.get("max_model_len"), MAX_CONTEXT);
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
                context: plausible(
                    props.pointer("/default_generation_settings/n_ctx"),
                    MAX_CONTEXT,
                ),
                slots: slots.clamp(1, MAX_SLOTS) as usize,
                thinking: template.contains("enable_thinking"),
            });
        }
        if entry.get("owned_by").and_then(Value::as_str) == Some("gemma-chat") {
            return Ok(ServerInfo {
                kind: ServerKind::GemmaChat,
                thinking: entry.get("thinking").and_then(Value::as_bool) == Some(true),
                model: chosen,
                context: max_model_len,
                slots: 0,
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
}

/// A count the server sent, if it is one and within 1..=`most` (a context of 2^64 tokens, or of
/// none, is no answer).
fn plausible(v: Option<&Value>, most: u64) -> Option<usize> {
    v.and_then(Value::as_u64)
        .filter(|n| (1..=most).contains(n))
        .map(|n| n as usize)
}
