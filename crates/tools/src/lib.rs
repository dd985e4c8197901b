//! gemma-chat's tools: the MCP servers a user configures and the built-in tools, offered to the
//! model and called for it.
//!
//! | I want to… | Go to |
//! |---|---|
//! | change a setting or the `mcpServers` import | [`config`] |
//! | start, list, call, stop a tool; what the engine holds | [`host`] |
//! | talk to one MCP server (stdio, streamable HTTP) | [`mcp`] |
//! | change `fetch_url`, `web_search`, `read_file` | [`builtin`] |
//! | change how calls are written, read or constrained | [`syntax`] |

#[cfg(feature = "host")]
pub mod builtin;
pub mod config;
#[cfg(feature = "host")]
pub mod host;
#[cfg(feature = "host")]
pub mod mcp;
pub mod syntax;
