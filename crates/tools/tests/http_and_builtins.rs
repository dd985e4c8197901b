//! The tool host over streamable HTTP (the test MCP server run as a web server on 127.0.0.1) and
//! the built-in tools: `read_file` only under its directories, `fetch_url` refusing loopback
//! unless the config allows it, and a page's text without its scripts.

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{args, python, root};
use gemma_tools::config::{BuiltinConfig, Limits, ServerConfig, ToolsConfig};
use gemma_tools::host::ToolHost;
use serde_json::json;

/// A child process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Starts `args` with `python` and waits until `port` accepts connections.
fn serve(program: &str, args: &[&str], port: u16, dir: &Path) -> Killed {
    let child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let child = Killed(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{args:?} never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

fn started(config: ToolsConfig) -> ToolHost {
    let host = ToolHost::start(config);
    host.wait_started(Duration::from_secs(60));
    host
}

#[test]
fn a_streamable_http_server_lists_and_answers() {
    let port = free_port();
    let dir = tempfile::tempdir().expect("tmp");
    let server = root().join("tests/fixtures/mcp/server.py");
    let port_text = port.to_string();
    let _server = serve(
        &python(),
        &[&server.display().to_string(), "streamable-http", &port_text],
        port,
        dir.path(),
    );
    let config = ToolsConfig {
        servers: [(
            "web".to_string(),
            ServerConfig {
                url: Some(format!("http://127.0.0.1:{port}/mcp")),
                headers: [(
                    "X-Client".to_string(),
                    "gemma-chat ${CARGO_PKG_NAME}".to_string(),
                )]
                .into(),
                ..ServerConfig::default()
            },
        )]
        .into(),
        ..ToolsConfig::default()
    };
    let h = started(config);
    let servers = h.servers();
    assert_eq!(
        (servers[0].transport.as_str(), servers[0].state.as_str()),
        ("http", "ready"),
        "{servers:?}"
    );
    assert!(
        h.tools()
            .iter()
            .any(|t| t.name == "forecast" && t.server == "web")
    );
    let r = h
        .call("forecast", args(json!({"city": "Rome", "days": 4})))
        .wait(Duration::from_secs(30));
    assert!(
        r.ok && r.text.starts_with("Rome: sunny for 4 days"),
        "{r:?}"
    );
}

#[test]
fn read_file_stays_in_its_directories() {
    let allowed = tempfile::tempdir().expect("tmp");
    let other = tempfile::tempdir().expect("tmp");
    std::fs::write(allowed.path().join("notes.txt"), "the notes").expect("write");
    std::fs::write(other.path().join("secret.txt"), "the other content").expect("write");
    std::os::unix::fs::symlink(
        other.path().join("secret.txt"),
        allowed.path().join("link.txt"),
    )
    .expect("symlink");
    let config = ToolsConfig {
        builtin: BuiltinConfig {
            read_file: vec![allowed.path().to_path_buf()],
            ..BuiltinConfig::default()
        },
        ..ToolsConfig::default()
    };
    let h = started(config);
    assert_eq!(
        h.tools()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["read_file"]
    );
    let read = |p: &str| {
        h.call("read_file", args(json!({ "path": p })))
            .wait(Duration::from_secs(10))
    };
    let ok = read("notes.txt");
    assert!(ok.ok && ok.text == "the notes", "{ok:?}");
    let abs = read(&allowed.path().join("notes.txt").display().to_string());
    assert!(abs.ok, "{abs:?}");
    for outside in [
        other.path().join("secret.txt").display().to_string(),
        "../secret.txt".to_string(),
        "link.txt".to_string(),
        "/etc/passwd".to_string(),
    ] {
        let r = read(&outside);
        assert!(
            !r.ok && !r.text.contains("other content"),
            "{outside}: {r:?}"
        );
    }
}

#[test]
fn fetch_url_refuses_private_addresses_unless_allowed_and_gives_a_pages_text() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("index.html"),
        "<html><head><title>T</title><script>var evil = 1;</script></head>\
         <body><h1>Hello there</h1><p>A paragraph.</p></body></html>",
    )
    .expect("page");
    let port = free_port();
    let port_text = port.to_string();
    let _web = serve(
        "python3",
        &["-m", "http.server", &port_text, "--bind", "127.0.0.1"],
        port,
        dir.path(),
    );
    let url = format!("http://127.0.0.1:{port}/index.html");
    let host = |allow_private| {
        started(ToolsConfig {
            builtin: BuiltinConfig {
                fetch_url: true,
                allow_private,
                ..BuiltinConfig::default()
            },
            limits: Limits::default(),
            ..ToolsConfig::default()
        })
    };
    let fetch = |h: &ToolHost, url: &str| {
        h.call("fetch_url", args(json!({ "url": url })))
            .wait(Duration::from_secs(30))
    };
    let refused = fetch(&host(false), &url);
    assert!(!refused.ok, "{refused:?}");
    let file = fetch(&host(false), "file:///etc/passwd");
    assert!(!file.ok, "{file:?}");
    let page = fetch(&host(true), &url);
    assert!(page.ok, "{page:?}");
    assert!(
        page.text.contains("Hello there") && page.text.contains("A paragraph."),
        "{page:?}"
    );
    assert!(!page.text.contains("evil"), "{page:?}");
}
