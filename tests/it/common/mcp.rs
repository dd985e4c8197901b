//! A real MCP server for the tests: the interpreter of the cached virtual environment with
//! PyPI's `mcp` (`scripts/mcp-python.sh`), `tests/fixtures/mcp/server.py` as a configured
//! server, and a started host with it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gemma_tools::config::{Limits, ServerConfig, ToolsConfig};
use gemma_tools::host::ToolHost;

use super::chat::root;

/// The interpreter of the cached virtual environment with PyPI's `mcp` (made on first use).
pub fn mcp_python() -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/mcp-python.sh"))
        .output()
        .expect("runs scripts/mcp-python.sh");
    assert!(
        out.status.success(),
        "scripts/mcp-python.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

/// The test server as the config's `[mcp.servers.test]`, logging its calls to `log`.
pub fn test_server(log: &Path) -> ServerConfig {
    ServerConfig {
        command: Some(mcp_python().display().to_string()),
        args: vec![
            root()
                .join("tests/fixtures/mcp/server.py")
                .display()
                .to_string(),
        ],
        env: BTreeMap::from([("MCP_CALL_LOG".to_string(), log.display().to_string())]),
        ..ServerConfig::default()
    }
}

/// A started host with the test server (as `test`) within `limits`, every server up.
pub fn host(log: &Path, limits: Limits) -> Arc<ToolHost> {
    let config = ToolsConfig {
        servers: BTreeMap::from([("test".to_string(), test_server(log))]),
        limits,
        ..ToolsConfig::default()
    };
    let host = ToolHost::start(config);
    host.wait_started(Duration::from_secs(60));
    let servers = host.servers();
    assert!(servers.iter().all(|s| s.error.is_none()), "{servers:?}");
    Arc::new(host)
}

/// The calls the test server logged, one JSON object each (`tool`, `arguments`).
pub fn logged(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// An engine on the checkpoint in `dir` with `host`'s tools (saving conversations in
/// `convo_dir`, when given), loaded and ready.
pub fn engine_with_tools(
    dir: &Path,
    host: Arc<ToolHost>,
    convo_dir: Option<PathBuf>,
) -> gemma_engine::EngineHandle {
    use gemma_engine::protocol::Event;
    let path = dir.to_path_buf();
    let options = gemma_engine::EngineOptions {
        tools: Some(gemma_engine::SharedTools(host)),
        convo_dir,
        ..gemma_engine::EngineOptions::default()
    };
    let h = gemma_engine::spawn(options, move |progress| {
        let (device, dtype) = (
            burn::tensor::Device::flex(),
            gemma_model::model::ComputeDtype::F32,
        );
        gemma_model::checkpoint::load(&path, &device, dtype, &mut |d, t| progress.layers(d, t))
    });
    loop {
        match super::chat::first_after_loading(&h) {
            Event::Ready { .. } => return h,
            Event::Tools { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}
