//! What a checked request becomes for the engine ([`settings`], [`exchanges`]): the tab's
//! settings (the config's, the request's fields over them, its tools or JSON answer), the
//! exchanges with their media written to files and their calls as the model wrote them, and the
//! pictures given as URLs fetched first ([`fetch_pictures`]).

use std::path::Path;
use std::sync::Mutex;

use crate::calls::CallBook;
use crate::error::ApiError;
use crate::media::attach_all;
use crate::request::{self, ChatRequest, Effort};
use crate::{Fetcher, ServeOptions};
use gemma_protocol::sampling::fresh_seed;
use gemma_protocol::{CallMade, CallResponse, Exchange, TabSettings};

/// Fetches the request's pictures given as http(s) URLs (`[serve] fetch_images`), one after
/// another; a URL that cannot be fetched fails the request, naming its field.
pub(crate) async fn fetch_pictures(
    fetch: Option<&Fetcher>,
    req: &mut ChatRequest,
) -> Result<(), ApiError> {
    let Some(fetch) = fetch else {
        return Ok(());
    };
    let messages = req.history.iter_mut().map(|e| &mut e.user);
    for m in messages.chain(std::iter::once(&mut req.last)) {
        for media in &mut m.media {
            let Some((url, field)) = media.url.clone() else {
                continue;
            };
            let bytes = (fetch.0)(url.clone()).await.map_err(|why| {
                ApiError::invalid(&field, format!("{url} could not be fetched: {why}"))
            })?;
            *media = media.fetched(bytes)?;
        }
    }
    Ok(())
}

/// The request's exchanges as the engine takes them: media written to files, each call as the
/// model wrote it where the book still holds it (the book held only to read a call, never
/// while a file is written).
pub(crate) fn exchanges(
    book: &Mutex<CallBook>,
    media_dir: &Path,
    history: Vec<request::Exchange>,
) -> Result<Vec<Exchange>, ApiError> {
    let written = |id: &str, arguments: &str| {
        let book = book.lock().unwrap_or_else(|p| p.into_inner());
        book.written(id, arguments).unwrap_or_default()
    };
    history
        .into_iter()
        .map(|e| {
            let calls = e
                .calls
                .into_iter()
                .map(|c| CallMade {
                    written: written(&c.id, &c.arguments),
                    name: c.name,
                    arguments: c.arguments,
                    at: c.at,
                    handover: c.handover,
                    response: c.response.map(|text| CallResponse {
                        text,
                        structured: None,
                    }),
                })
                .collect();
            Ok(Exchange {
                media: attach_all(media_dir, &e.user.media)?,
                user: e.user.text,
                answer: e.answer,
                calls,
            })
        })
        .collect()
}

/// The tab's settings for a request: the config's, with the request's own fields over them.
pub(crate) fn settings(o: &ServeOptions, r: &ChatRequest, n: u64) -> Result<TabSettings, ApiError> {
    let mut s = o.base.clone();
    s.system = r.system.clone();
    let p = &mut s.sampling;
    p.temperature = r.temperature.unwrap_or(p.temperature);
    p.top_p = r.top_p.unwrap_or(p.top_p);
    p.top_k = r.top_k.unwrap_or(p.top_k);
    p.min_p = r.min_p.unwrap_or(p.min_p);
    // A request without a seed gets its own: its number keeps two in one clock tick apart.
    p.seed = r.seed.unwrap_or_else(|| fresh_seed(n));
    s.max_new_tokens = r.max_tokens.unwrap_or(s.max_new_tokens);
    s.stop.extend(r.stop.iter().cloned());
    let (thinking, budget) = match r.effort {
        Some(Effort::None) => (Some(false), None),
        Some(Effort::Low) => (Some(true), Some(o.budgets[0])),
        Some(Effort::Medium) => (Some(true), Some(o.budgets[1])),
        Some(Effort::High) => (Some(true), Some(o.budgets[2])),
        None => (r.enable_thinking, None),
    };
    if thinking == Some(true) && !o.can_think {
        let param = if r.effort.is_some() {
            "reasoning_effort"
        } else {
            "chat_template_kwargs.enable_thinking"
        };
        return Err(ApiError::invalid(
            param,
            "this model has no thinking mode: leave thinking off",
        ));
    }
    s.thinking = thinking.unwrap_or(s.thinking && o.can_think);
    s.thought_budget = r.thought_budget.or(budget).or(s.thought_budget);
    let (declared, param) = match &r.json {
        Some(_) if !r.tools.declared.is_empty() => {
            return Err(ApiError::invalid(
                "response_format",
                "a JSON answer and tools in one request are not served: send one of them",
            ));
        }
        Some(f) => (vec![f.tool.clone()], "response_format"),
        None => (r.tools.declared.clone(), "tools"),
    };
    if !declared.is_empty() && !o.can_call_tools {
        return Err(ApiError::invalid(
            param,
            "this model writes no tool calls (Gemma 4 does), and the call grammar is what \
             constrains tools and JSON answers: send the request without it",
        ));
    }
    s.client_tools = declared;
    s.tool_choice = match r.json {
        Some(_) => gemma_protocol::ToolChoice::Required,
        None => r.tools.choice,
    };
    Ok(s)
}
