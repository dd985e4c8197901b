//! The routes: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions` (streamed as
//! server-sent events or whole), anything else a JSON 404. A request is checked
//! ([`crate::request`]), given a slot ([`crate::slots`]) and answered by a turn
//! ([`crate::turn`]) that runs beside the connection: when the client goes away the stream or
//! the handler is dropped, and the turn cancels itself.

use std::convert::Infallible;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream;
use serde_json::json;
use tokio::sync::mpsc;

use crate::ServeOptions;
use crate::calls::CallBook;
use crate::error::{ApiError, ServeError};
use crate::input::{exchanges, fetch_pictures, settings};
use crate::media::attach_all;
use crate::pump::{self, Engine};
use crate::request;
use crate::slots::Pool;
use crate::turn::{self, ApiCall, Out, TurnInput};
use crate::wire::{self, Ids};
use gemma_protocol::EngineHandle;

/// What every handler shares.
struct App {
    engine: Arc<Engine>,
    pool: Arc<Pool>,
    options: ServeOptions,
    /// Answers so far (their ids) and the seeds of requests without one.
    count: AtomicU64,
    /// The calls the model made, as it wrote them.
    book: Arc<Mutex<CallBook>>,
}

/// Serves until the listener fails or `stop` resolves (then the connections being answered
/// finish first, and the engine is shut down as its handle drops).
pub(crate) async fn serve(
    listener: TcpListener,
    options: ServeOptions,
    engine: EngineHandle,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let tabs: Vec<u64> = (1..=options.slots as u64).collect();
    let (engine, receivers) = pump::start(engine, &tabs);
    let pool = Pool::new(
        tabs.into_iter().zip(receivers).collect(),
        options.parallel,
        options.queue,
    );
    let max_body = options.max_body;
    let app = Arc::new(App {
        engine,
        pool,
        options,
        count: AtomicU64::new(0),
        book: Arc::default(),
    });
    let routes = Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(app);
    listener
        .set_nonblocking(true)
        .map_err(ServeError::Runtime)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(ServeError::Runtime)?;
    axum::serve(listener, routes)
        .with_graceful_shutdown(stop)
        .await
        .map_err(ServeError::Runtime)
}

async fn health(State(app): State<Arc<App>>) -> Response {
    match app.engine.stopped() {
        None => Json(json!({"status": "ok"})).into_response(),
        Some(why) => ApiError::status(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!("the engine stopped: {why}"),
        )
        .into_response(),
    }
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return e.into_response();
    }
    Json(wire::models(
        &app.options.model,
        app.options.context_length,
        app.options.can_think,
    ))
    .into_response()
}

async fn not_found() -> Response {
    ApiError::status(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "no such route: gemma-chat serves /v1/chat/completions, /v1/models and /health",
    )
    .into_response()
}

/// The bearer key, where one is set; compared in time independent of where it differs.
fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &app.options.api_key else {
        return Ok(());
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let same = sent.len() == key.len()
        && sent
            .bytes()
            .zip(key.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Ok(())
    } else {
        Err(ApiError::status(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "a missing or wrong API key: send `Authorization: Bearer <key>`",
        ))
    }
}

async fn chat(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match start(&app, &headers, body).await {
        Ok((
            Shape {
                stream: true,
                usage,
            },
            ids,
            rx,
        )) => streamed(usage, ids, rx),
        Ok((_, ids, rx)) => whole(ids, rx).await,
        Err(e) => e.into_response(),
    }
}

/// How the answer goes back: streamed or whole, with the usage chunk or not.
struct Shape {
    stream: bool,
    usage: bool,
}

/// Checks the request, takes a slot and starts its turn: the turn's output arrives on the
/// receiver.
async fn start(
    app: &Arc<App>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Shape, Ids, mpsc::Receiver<Out>), ApiError> {
    authorize(app, headers)?;
    let body = body.map_err(|e| {
        let too_big = e.status() == StatusCode::PAYLOAD_TOO_LARGE;
        let message = if too_big {
            format!("the body is over {} bytes", app.options.max_body)
        } else {
            format!("the body could not be read: {e}")
        };
        ApiError::status(e.status(), "invalid_request_error", message)
    })?;
    let fetch = app.options.fetch.is_some();
    let mut req = request::parse(&body, app.options.max_media, fetch)?;
    fetch_pictures(app.options.fetch.as_ref(), &mut req).await?;
    let n = app.count.fetch_add(1, Ordering::Relaxed);
    let settings = settings(&app.options, &req, n)?;
    let keys = wire::keys(&req);
    let shape = Shape {
        stream: req.stream,
        usage: req.include_usage,
    };
    let prior = match (req.continues, req.history.last()) {
        (true, Some(e)) => (e.answer.clone(), wire::call_keys(e)),
        _ => (String::new(), Vec::new()),
    };
    let history = exchanges(&app.book, &app.options.media_dir, req.history)?;
    let media = attach_all(&app.options.media_dir, &req.last.media)?;
    let lease = app.pool.acquire(&keys).await?;
    let ids = Ids {
        id: format!("chatcmpl-{n:x}"),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: app.options.model.clone(),
    };
    let input = TurnInput {
        settings,
        history,
        text: req.last.text,
        media,
        continues: req.continues,
        json: req.json.as_ref().map(|f| f.wrapped),
        prior,
        keys,
        number: n,
    };
    let (tx, rx) = mpsc::channel(256);
    let sink = (app.book.clone(), tx);
    tokio::spawn(turn::answer(app.engine.clone(), lease, input, sink));
    Ok((shape, ids, rx))
}

/// A whole answer, once the turn is done.
async fn whole(ids: Ids, mut rx: mpsc::Receiver<Out>) -> Response {
    let (mut text, mut thought) = (String::new(), String::new());
    let mut calls: Vec<ApiCall> = Vec::new();
    while let Some(o) = rx.recv().await {
        match o {
            Out::Text(t) => text.push_str(&t),
            Out::Thought(t) => thought.push_str(&t),
            Out::Call(c) => calls.push(c),
            Out::Done(d) => {
                let answer = wire::completion(&ids, (&text, &thought), &calls, &d);
                return Json(answer).into_response();
            }
            Out::Failed(e) => return e.into_response(),
        }
    }
    ApiError::status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "the turn ended unanswered",
    )
    .into_response()
}

/// A streamed answer: a chunk per piece of text, the finish, the usage when asked, `[DONE]`.
fn streamed(usage: bool, ids: Ids, rx: mpsc::Receiver<Out>) -> Response {
    let first = wire::event(&wire::chunk(
        &ids,
        json!({"role": "assistant", "content": ""}),
        None,
    ));
    // (The calls so far: each call's index.)
    let state = (rx, ids, usage, false, 0usize);
    let rest = stream::unfold(state, |(mut rx, ids, usage, ended, mut calls)| async move {
        if ended {
            return None;
        }
        let (text, ended) = match rx.recv().await {
            Some(Out::Call(c)) => {
                let delta = json!({"tool_calls": [wire::tool_call(&c, Some(calls))]});
                calls += 1;
                (wire::event(&wire::chunk(&ids, delta, None)), false)
            }
            Some(Out::Text(t)) => (
                wire::event(&wire::chunk(&ids, json!({"content": t}), None)),
                false,
            ),
            Some(Out::Thought(t)) => {
                let delta = json!({"reasoning_content": t});
                (wire::event(&wire::chunk(&ids, delta, None)), false)
            }
            Some(Out::Done(d)) => {
                let mut s = wire::event(&wire::chunk(&ids, json!({}), Some(d.finish)));
                if usage {
                    s.push_str(&wire::event(&wire::usage_chunk(&ids, &d)));
                }
                s.push_str("data: [DONE]\n\n");
                (s, true)
            }
            Some(Out::Failed(e)) => (format!("{}data: [DONE]\n\n", wire::event(&e.body())), true),
            None => ("data: [DONE]\n\n".to_string(), true),
        };
        Some((
            Ok::<_, Infallible>(Bytes::from(text)),
            (rx, ids, usage, ended, calls),
        ))
    });
    let body = stream::once(async move { Ok::<_, Infallible>(Bytes::from(first)) });
    let body = Body::from_stream(futures_util::StreamExt::chain(body, rest));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
