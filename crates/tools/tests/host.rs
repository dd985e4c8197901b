//! The tool host against a real MCP server over stdio (the official Python SDK's MCPServer,
//! `tests/fixtures/mcp/server.py`, in the virtual environment `scripts/mcp-python.sh` makes):
//! listing, a call and its answer, the child's environment, a crash, a hang, a server that does
//! not start, `auto_approve`, and the config's `${VAR}` and `mcpServers` import.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{args, python, root};
use gemma_tools::config::{
    ConfigError, Limits, ServerConfig, ToolsConfig, import_mcp_servers, servers_to_toml, substitute,
};
use gemma_tools::host::ToolHost;
use serde_json::{Map, json};

fn server(env: &[(&str, &str)], auto: &[&str]) -> ServerConfig {
    ServerConfig {
        command: Some(python()),
        args: vec![
            root()
                .join("tests/fixtures/mcp/server.py")
                .display()
                .to_string(),
        ],
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        auto_approve: auto.iter().map(|s| s.to_string()).collect(),
        ..ServerConfig::default()
    }
}

fn host(servers: Vec<(&str, ServerConfig)>, timeout: Duration) -> ToolHost {
    let config = ToolsConfig {
        servers: servers
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect(),
        limits: Limits {
            call_timeout: timeout,
            max_result_bytes: 64,
            ..Limits::default()
        },
        ..ToolsConfig::default()
    };
    let host = ToolHost::start(config);
    host.wait_started(Duration::from_secs(60));
    host
}

#[test]
fn a_stdio_server_lists_and_answers_and_sees_only_its_environment() {
    // Cargo runs the test with CARGO_PKG_NAME set: the server gets it only as GIVEN.
    assert!(std::env::var("CARGO_PKG_NAME").is_ok());
    let h = host(
        vec![("t", server(&[("GIVEN", "${CARGO_PKG_NAME}")], &["env"]))],
        Duration::from_secs(30),
    );
    let servers = h.servers();
    assert_eq!(servers.len(), 1);
    assert_eq!(
        (servers[0].state.as_str(), servers[0].error.as_ref()),
        ("ready", None)
    );
    let tools = h.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for want in ["forecast", "crash", "hang", "env"] {
        assert!(names.contains(&want), "{names:?}");
    }
    let forecast = tools
        .iter()
        .find(|t| t.name == "forecast")
        .expect("forecast");
    assert_eq!(forecast.parameters["required"], json!(["city", "days"]));
    assert!(!forecast.auto_approve);
    assert!(
        tools
            .iter()
            .find(|t| t.name == "env")
            .expect("env")
            .auto_approve
    );

    let r = h
        .call(
            "forecast",
            args(json!({"city": "Oslo", "days": 2, "unit": "celsius"})),
        )
        .wait(Duration::from_secs(30));
    assert!(r.ok, "{r:?}");
    // Cut to max_result_bytes with a note; the bytes counted before the cut.
    assert!(r.text.starts_with("Oslo: sunny for 2 days"), "{r:?}");
    assert!(r.bytes > 64 && r.text.contains("cut"), "{r:?}");

    let env = h.call("env", Map::new()).wait(Duration::from_secs(30));
    let mut names: Vec<&str> = env.text.split_whitespace().collect();
    names.sort();
    // PATH, HOME and what the config names; never the rest of gemma-chat's environment (a
    // Python interpreter may add a few of its own, such as LC_CTYPE).
    assert!(
        names.contains(&"GIVEN") && names.contains(&"PATH"),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.starts_with("CARGO")), "{names:?}");

    // What the server was handed (GIVEN's value) never comes back out of the host, wherever it
    // sits in what the server says: it would be shown, saved, fed to the model and sent to a
    // remote LLM server.
    let secret = std::env::var("CARGO_PKG_NAME").expect("set");
    let r = h
        .call("getenv", args(json!({"name": "GIVEN"})))
        .wait(Duration::from_secs(30));
    assert!(r.ok, "{r:?}");
    assert_eq!(r.text, "GIVEN=[secret]");
    let r = h
        .call("getenv", args(json!({"name": secret})))
        .wait(Duration::from_secs(30));
    assert!(r.ok, "{r:?}");
    assert_eq!(r.text, "[secret] is not set");
}

#[test]
fn a_crash_a_hang_and_a_server_that_never_starts_fail_alone() {
    let broken = ServerConfig {
        command: Some("/nonexistent/mcp-server".into()),
        ..ServerConfig::default()
    };
    let h = host(
        vec![("t", server(&[], &[])), ("broken", broken)],
        Duration::from_secs(2),
    );
    let servers = h.servers();
    let broken = servers.iter().find(|s| s.name == "broken").expect("listed");
    assert_eq!(broken.state, "failed");
    assert!(broken.error.as_deref().is_some_and(|e| !e.is_empty()));

    let hang = h.call("hang", Map::new()).wait(Duration::from_secs(30));
    assert!(!hang.ok && hang.seconds < 20.0, "{hang:?}");
    let crash = h.call("crash", Map::new()).wait(Duration::from_secs(30));
    assert!(!crash.ok, "{crash:?}");
    // The crashed server is marked failed and its tools leave the list; the host goes on.
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        h.tools().iter().all(|t| t.name != "forecast")
    });
    let t = h
        .servers()
        .into_iter()
        .find(|s| s.name == "t")
        .expect("listed");
    assert!(gone && t.state == "failed", "{t:?}");
    let after = h
        .call("forecast", args(json!({"city": "x", "days": 1})))
        .wait(Duration::from_secs(5));
    assert!(!after.ok, "{after:?}");
    assert!(!h.call("nope", Map::new()).wait(Duration::from_secs(5)).ok);
}

#[test]
fn variables_and_imports_are_read_with_clear_errors() {
    let env = |k: &str| (k == "TOKEN").then(|| "abc".to_string());
    assert_eq!(
        substitute("Bearer ${TOKEN}", &env).as_deref(),
        Ok("Bearer abc")
    );
    assert_eq!(substitute("$$5 and $x", &env).as_deref(), Ok("$5 and $x"));
    assert_eq!(
        substitute("${MISSING}", &env),
        Err(ConfigError::MissingVar("MISSING".into()))
    );
    assert!(matches!(
        substitute("${1X}", &env),
        Err(ConfigError::BadReference(_))
    ));

    let json = r#"{"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"KEY": "${KEY}"}},
        "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${T}"}}
    }}"#;
    let servers = import_mcp_servers(json).expect("imports");
    assert_eq!(servers["files"].command.as_deref(), Some("npx"));
    assert_eq!(
        servers["web"].url.as_deref(),
        Some("https://example.com/mcp")
    );
    let toml_text = servers_to_toml(&servers);
    #[derive(serde::Deserialize)]
    struct File {
        mcp: Mcp,
    }
    #[derive(serde::Deserialize)]
    struct Mcp {
        servers: BTreeMap<String, ServerConfig>,
    }
    let back: File = toml::from_str(&toml_text).unwrap_or_else(|e| panic!("{toml_text}\n{e}"));
    assert_eq!(back.mcp.servers, servers, "{toml_text}");
    assert!(import_mcp_servers("[1, 2]").is_err());
    assert!(import_mcp_servers(r#"{"mcpServers": {"x": {}}}"#).is_err());
    let both = ServerConfig {
        command: Some("a".into()),
        url: Some("http://b".into()),
        ..ServerConfig::default()
    };
    assert!(both.check("x").is_err());
    assert!(ServerConfig::default().check("builtin").is_err());
}

#[test]
fn a_hostile_server_is_cleaned_and_what_it_lies_about_is_refused() {
    let hostile = ServerConfig {
        command: Some(python()),
        args: vec![
            root()
                .join("tests/fixtures/mcp/hostile.py")
                .display()
                .to_string(),
        ],
        ..ServerConfig::default()
    };
    let h = host(vec![("evil", hostile.clone())], Duration::from_secs(10));
    let servers = h.servers();
    assert_eq!(servers[0].state, "ready", "{servers:?}");
    // The tools whose schemas cannot be followed are not offered, and the server says why.
    let note = servers[0].error.clone().unwrap_or_default();
    assert!(note.contains("deep") && note.contains("badkey"), "{note}");
    // A schema nested past what JSON is read leaves its tool out alone (probe 2026-12-06, F5).
    assert!(
        note.contains("`abyss`: its inputSchema is nested deeper than 128"),
        "{note}"
    );
    let tools = h.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"ok") && names.contains(&"liar"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"deep") && !names.contains(&"badkey") && !names.contains(&"abyss"),
        "{names:?}"
    );
    for t in &tools {
        let text = format!("{} {} {}", t.name, t.description, t.parameters);
        assert!(
            !text.contains("<|") && !text.contains("<start_of_turn>"),
            "{text}"
        );
        assert!(!text.chars().any(char::is_control), "{text:?}");
    }
    // A result holding escapes and special-token text comes back as text, for the engine to
    // feed as plain tokens; a result of the wrong shape is a failed call, not a crash.
    let ok = h
        .call("ok", args(json!({"q": "x"})))
        .wait(Duration::from_secs(10));
    assert!(ok.ok && ok.text.contains("done"), "{ok:?}");
    let liar = h.call("liar", Map::new()).wait(Duration::from_secs(10));
    assert!(!liar.ok, "{liar:?}");
    assert!(h.servers()[0].state == "ready", "the server stays usable");
    // An answer over 8 MiB, or nested deeper than JSON is read, fails its call at once (not
    // after the 10 s time-out) and the server's message says why (probe 2026-12-06, F5).
    for (tool, why) in [("nested", "nested deeper"), ("huge", "over 8 MiB")] {
        let h = host(vec![("evil", hostile.clone())], Duration::from_secs(10));
        let started = std::time::Instant::now();
        let r = h.call(tool, Map::new()).wait(Duration::from_secs(30));
        assert!(!r.ok, "{tool}: {r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{tool}: failed only after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(300));
        let server = &h.servers()[0];
        let error = server.error.clone().unwrap_or_default();
        assert!(
            server.state == "failed" && error.contains(why),
            "{tool}: {server:?}"
        );
    }
}
