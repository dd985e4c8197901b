//! A streamable-HTTP MCP server: its headers resolved from the environment ([`headers`]), and the
//! handshake over rmcp's reqwest transport ([`connect`]). rmcp 3.11 speaks reqwest 0.13, so this
//! module builds that client itself: rustls with the *ring* provider and the webpki roots (the
//! same TLS stack as the workspace's reqwest 0.12, so no second crypto library is compiled), no
//! redirects, no proxy from the environment, and bounded bodies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::config::{ServerConfig, substitute};
use crate::host::clean;
use crate::mcp::{Connection, Handler, MAX_MESSAGE, MAX_QUOTE, McpError};

/// The server's HTTP headers: `headers_env` (each value read from the variable it names) and
/// `headers` (`${VAR}` substituted), checked as HTTP header names and values.
pub fn headers(
    config: &ServerConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HashMap<HeaderName, HeaderValue>, McpError> {
    let mut out = HashMap::new();
    let mut values = Vec::new();
    for (header, var) in &config.headers_env {
        let value = env(var).ok_or_else(|| {
            McpError::Start(format!(
                "header {header}: the environment variable {var} is not set"
            ))
        })?;
        values.push((header, value));
    }
    for (header, value) in &config.headers {
        let value =
            substitute(value, env).map_err(|e| McpError::Start(format!("header {header}: {e}")))?;
        values.push((header, value));
    }
    for (header, value) in values {
        let name = HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| McpError::Start(format!("`{header}` is not an HTTP header name")))?;
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| McpError::Start(format!("header {header}: its value is not valid")))?;
        value.set_sensitive(true);
        out.insert(name, value);
    }
    Ok(out)
}

/// The reqwest 0.13 client the transport uses.
fn client(connect_timeout: Duration) -> Result<reqwest013::Client, McpError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| McpError::Start(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest013::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest013::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| McpError::Start(format!("the HTTP client cannot be built: {e}")))
}

/// Runs the handshake with the server at `url` within `timeout`.
pub async fn connect(
    url: &str,
    headers: HashMap<HeaderName, HeaderValue>,
    handler: Handler,
    timeout: Duration,
) -> Result<Connection, McpError> {
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        .max_sse_event_size(MAX_MESSAGE)
        .max_json_response_size(MAX_MESSAGE)
        .max_error_response_size(16 << 10);
    let transport = StreamableHttpClientTransport::with_client(client(timeout)?, config);
    match tokio::time::timeout(timeout, handler.serve(transport)).await {
        Ok(Ok(service)) => Ok(Connection {
            service,
            child: None,
            stderr: None,
        }),
        Ok(Err(e)) => Err(McpError::Start(format!(
            "cannot connect to {url}: {}",
            clean::message(&e.to_string(), MAX_QUOTE)
        ))),
        Err(_) => Err(McpError::Start(format!(
            "{url} did not answer initialize within {:.0} s",
            timeout.as_secs_f64()
        ))),
    }
}
