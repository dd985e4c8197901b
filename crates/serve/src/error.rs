//! What can stop the server from starting ([`ServeError`]), and the API's error answers
//! ([`ApiError`]: a status and OpenAI's `{"error": {...}}` body naming the field at fault).

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why `gemma-chat serve` could not start or went on no longer.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The host is not an IP address.
    #[error(
        "`{0}` is not an IP address to listen on (e.g. 127.0.0.1, or 0.0.0.0 for every interface)"
    )]
    Host(String),
    /// Off loopback without a key.
    #[error(
        "listening on {0} makes the model reachable from the network: set `[serve] api_key_env` \
         to the name of an environment variable that holds a key (clients send it as a bearer \
         token), or listen on 127.0.0.1"
    )]
    NeedsKey(String),
    /// `slots = 0`.
    #[error("[serve] slots must be at least 1")]
    NoSlots,
    /// The socket could not be bound.
    #[error("cannot listen on {0}: {1} (is another server using the port? choose one with --port)")]
    Bind(SocketAddr, std::io::Error),
    /// The media directory could not be made.
    #[error("cannot create {0}: {1}")]
    MediaDir(PathBuf, std::io::Error),
    /// The async runtime or the listener failed.
    #[error("the server stopped: {0}")]
    Runtime(std::io::Error),
}

/// An error answer of the API.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, as a path (`messages[2].content`).
    pub param: Option<String>,
    /// OpenAI's `type`.
    pub kind: &'static str,
}

impl ApiError {
    /// A malformed or unsupported request: 400, naming `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.into()),
            kind: "invalid_request_error",
        }
    }

    /// Another status, no field.
    pub fn status(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            kind,
        }
    }

    /// The body, as OpenAI writes it.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        r
    }
}
