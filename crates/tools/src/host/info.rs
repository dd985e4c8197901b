//! A server's state as the protocol reports it to front ends ([`server_info`]).

pub use gemma_protocol::ServerInfo;

use super::state::{Server, Status};

/// `server` for the protocol.
pub fn server_info(server: &Server) -> ServerInfo {
    let (state, error) = match &server.status {
        Status::Disabled => ("disabled", None),
        Status::Starting => ("starting", None),
        Status::Ready if server.skipped.is_empty() => ("ready", None),
        Status::Ready => (
            "ready",
            Some(format!("not offered: {}", server.skipped.join("; "))),
        ),
        Status::Failed(why) => ("failed", Some(why.clone())),
    };
    ServerInfo {
        name: server.name.clone(),
        transport: server.transport.to_owned(),
        state: state.to_owned(),
        tools: server.tools.iter().map(|t| t.name.clone()).collect(),
        error,
    }
}
