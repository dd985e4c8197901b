//! Tool calls end to end on a tiny Gemma 4 checkpoint with the official chat template and a real
//! MCP server over stdio (the official Python SDK, `tests/fixtures/mcp/server.py`): with
//! `tool_choice = "required"` the model's call is constrained to the tool's schema, the server
//! receives exactly the arguments the model wrote, the result joins the same model turn (no
//! re-prefill, and a follow-up reuses all of it), and denial, a crashing server, a hanging one
//! and Esc while a call waits each end the call cleanly.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gemma_engine::EngineHandle;
use gemma_engine::protocol::TabSettings;
use gemma_engine::protocol::{
    Command, Event, Reuse, TabId, ToolCall, ToolChoice, ToolDecision, ToolOutcome, ToolSelection,
    TurnEnd, TurnStats,
};
use gemma_tools::config::Limits;
use gemma_tools::host::ToolHost;
use serde_json::Value;

use super::common::chat::{fixture, open};
use super::common::mcp::{self, logged, test_server};

const OFFICIAL: &str = "tests/fixtures/templates/official/gemma4-31b-it.jinja";

/// A started host with the test server, calls bounded by `timeout`.
fn host(log: &Path, timeout: Duration) -> Arc<ToolHost> {
    mcp::host(
        log,
        Limits {
            call_timeout: timeout,
            // The tiny checkpoint rarely closes a string by itself: its calls are finished by
            // force, early enough to leave its 512-token context room for a follow-up.
            max_call_tokens: 24,
            ..Limits::default()
        },
    )
}

/// The tiny Gemma 4 engine with the official template and `host`'s tools; tab 1 open, greedy,
/// calling only `tool`, as `required`.
fn engine(dir: &Path, host: Arc<ToolHost>, tool: &str) -> EngineHandle {
    let h = mcp::engine_with_tools(dir, host, None);
    open(&h, 1);
    let settings = TabSettings {
        max_new_tokens: 48,
        tools: ToolSelection::Only(vec![format!("test.{tool}")]),
        tool_choice: ToolChoice::Required,
        ..TabSettings::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    h
}

/// What one turn of tab 1 showed.
#[derive(Default)]
struct Seen {
    calls: Vec<ToolCall>,
    results: Vec<ToolOutcome>,
    end: Option<(TurnEnd, TurnStats)>,
    tokens: usize,
}

/// Sends `text` to tab 1 and follows the turn, answering each call that waits with `decide`.
fn turn(h: &EngineHandle, text: &str, decide: &mut dyn FnMut(&ToolCall) -> Command) -> Seen {
    h.send(Command::Submit {
        tab: 1,
        text: text.into(),
        images: Vec::new(),
    });
    let mut seen = Seen::default();
    loop {
        let e = h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("the turn goes on");
        match e {
            Event::ToolCall { call, approval, .. } => {
                if approval {
                    h.send(decide(&call));
                }
                seen.calls.push(call);
            }
            Event::ToolResult { outcome, .. } => seen.results.push(outcome),
            Event::Committed { tokens, .. } => seen.tokens = tokens,
            Event::Finished { end, stats, .. } => {
                seen.end = Some((end, stats));
                return seen;
            }
            Event::Failed { error, .. } => panic!("the turn failed: {error}"),
            _ => {}
        }
    }
}

fn once(tab: TabId) -> impl FnMut(&ToolCall) -> Command {
    move |c| Command::DecideTool {
        tab,
        call: c.id,
        decision: ToolDecision::Once,
    }
}

#[test]
fn a_required_call_reaches_the_server_as_written_and_the_turn_goes_on_warm() {
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let log = dir.path().join("calls.jsonl");
    let h = engine(dir.path(), host(&log, Duration::from_secs(30)), "forecast");
    let seen = turn(&h, "What is the weather in Paris?", &mut once(1));
    let (end, stats) = seen.end.clone().expect("finished");
    assert_eq!(
        seen.calls.len(),
        1,
        "required: exactly the forced call ({end:?})"
    );
    let call = &seen.calls[0];
    assert_eq!(
        (call.name.as_str(), call.server.as_str()),
        ("forecast", "test")
    );
    // The arguments satisfy the schema: city a string, days an integer, unit one of the enum.
    let args: Value = serde_json::from_str(&call.arguments).expect("JSON arguments");
    assert!(args["city"].is_string(), "{args}");
    assert!(args["days"].is_i64() || args["days"].is_u64(), "{args}");
    if let Some(unit) = args.get("unit") {
        assert!(
            matches!(unit.as_str(), Some("celsius" | "fahrenheit")),
            "{args}"
        );
    }
    // The server got exactly them.
    let got = logged(&log);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["tool"], "forecast");
    for (k, v) in args.as_object().expect("an object") {
        assert_eq!(&got[0]["arguments"][k], v, "{k}");
    }
    // Its result is what the model was given, in the same turn, without a re-prefill.
    let result = &seen.results[0];
    assert!(result.ok, "{result:?}");
    assert!(result.text.contains("sunny for"), "{result:?}");
    assert_eq!((stats.tool_calls, stats.reuse), (1, Reuse::New));
    assert!(stats.tool_tokens > 10, "{stats:?}");
    let prompt = stats.prefilled_tokens;
    assert!(
        seen.tokens >= prompt + stats.generated_tokens + stats.tool_tokens,
        "{stats:?}"
    );
    // A follow-up reuses the whole first turn, the tool's response included.
    let next = turn(&h, "And tomorrow?", &mut once(1));
    let (_, next_stats) = next.end.expect("finished");
    assert_eq!(next_stats.reuse, Reuse::ExactPrefix, "{next_stats:?}");
    assert!(
        next_stats.reused_tokens >= seen.tokens,
        "{next_stats:?} after {}",
        seen.tokens
    );
}

#[test]
fn a_denied_call_gives_the_model_the_note_and_never_runs() {
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let log = dir.path().join("calls.jsonl");
    let h = engine(dir.path(), host(&log, Duration::from_secs(30)), "forecast");
    let seen = turn(&h, "Weather?", &mut |c| Command::DecideTool {
        tab: 1,
        call: c.id,
        decision: ToolDecision::Deny {
            note: Some("ask me first".into()),
        },
    });
    assert!(seen.end.is_some());
    let r = &seen.results[0];
    assert!(!r.ok && r.text.contains("ask me first"), "{r:?}");
    assert!(
        logged(&log).is_empty(),
        "a denied call never reaches the server"
    );
}

#[test]
fn a_crashing_and_a_hanging_server_fail_the_call_not_the_turn() {
    for (tool, timeout) in [("crash", 30), ("hang", 2)] {
        let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
        let log = dir.path().join("calls.jsonl");
        let h = engine(dir.path(), host(&log, Duration::from_secs(timeout)), tool);
        let seen = turn(&h, "Go.", &mut once(1));
        let r = &seen.results[0];
        assert!(!r.ok, "{tool}: {r:?}");
        assert!(!r.text.is_empty(), "{tool}: the failure is said");
        let (end, stats) = seen.end.expect("the turn ends");
        assert!(!matches!(end, TurnEnd::Cancelled), "{tool}: {end:?}");
        // After the failure the model may call again (only the first call is required).
        assert!(stats.tool_calls >= 1, "{tool}: {stats:?}");
        let got = logged(&log).len();
        assert!(got >= 1, "{tool}: the server got the call");
        if tool == "crash" {
            assert_eq!(got, 1, "a crashed server gets no more calls");
        }
    }
}

#[test]
fn esc_while_a_call_waits_stops_it_and_ends_the_turn() {
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let log = dir.path().join("calls.jsonl");
    let h = engine(dir.path(), host(&log, Duration::from_secs(30)), "forecast");
    let seen = turn(&h, "Weather?", &mut |_| Command::Cancel { tab: 1 });
    let (end, _) = seen.end.expect("ends");
    assert_eq!(end, TurnEnd::Cancelled);
    assert!(!seen.results[0].ok, "{:?}", seen.results);
    assert!(logged(&log).is_empty());
    // The call and its `stopped` response stay in the conversation, well-formed.
    assert!(seen.tokens > 0, "the tab's conversation is committed");
}

/// Runs `gemma-chat --prompt TEXT` on the tiny Gemma 4 (official template) with the test
/// server as `[mcp.servers.test]` offering only `tool`, and `args`; returns whether it exited
/// 0, its stderr, and the calls the server logged.
fn headless(tool: &str, args: &[&str]) -> (bool, String, Vec<Value>) {
    headless_with(tool, "", args)
}

/// [`headless`] with `config` (TOML tables) before the tools' part of the config file.
fn headless_with(tool: &str, config: &str, args: &[&str]) -> (bool, String, Vec<Value>) {
    let dir = fixture("gemma4_e2b_style", Some(OFFICIAL));
    let log = dir.path().join("calls.jsonl");
    let server = test_server(&log);
    let quoted = |s: &str| serde_json::to_string(s).expect("a string");
    let config = format!(
        "{config}\n[tools]\ncall_timeout = 5\nmax_call_tokens = 24\n\n[mcp.servers.test]\ncommand = {}\nargs = [{}]\n\
         env = {{ MCP_CALL_LOG = {}, MCP_TOOLS = \"{tool}\" }}\n",
        quoted(server.command.as_deref().expect("command")),
        quoted(&server.args[0]),
        quoted(&log.display().to_string()),
    );
    let file = dir.path().join("config.toml");
    std::fs::write(&file, config).expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .arg("--model")
        .arg(dir.path())
        .arg("--config")
        .arg(&file)
        .args([
            "--prompt",
            "What is the weather in Paris?",
            "--seed",
            "3",
            "--max-new-tokens",
            "8",
        ])
        .args(args)
        .env("GEMMA_CHAT_DATA_DIR", dir.path().join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), stderr, logged(&log))
}

#[test]
fn headless_required_calls_with_yes_and_says_each_call_on_stderr() {
    let (ok, stderr, got) = headless("forecast", &["--tool-choice", "required", "--yes"]);
    assert!(ok, "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("tool "))
        .unwrap_or_else(|| panic!("no tool line: {stderr}"));
    // `tool NAME {json args} -> N bytes`, the args exactly what the server received.
    let (name_args, bytes) = line.rsplit_once(" -> ").expect("an arrow");
    assert!(bytes.ends_with(" bytes"), "{line}");
    let (name, args) = name_args["tool ".len()..].split_once(' ').expect("args");
    let args: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{line}: {e}"));
    let entry = got
        .iter()
        .find(|c| c["tool"] == name)
        .unwrap_or_else(|| panic!("the server got no {name} call: {got:?}\n{stderr}"));
    if name == "forecast" {
        for (k, v) in args.as_object().expect("an object") {
            assert_eq!(&entry["arguments"][k], v, "{line}");
        }
    }
}

#[test]
fn a_required_call_that_cannot_fit_is_said_not_skipped_silently() {
    // The prompt with the tool's declaration takes 294 of 400 tokens: no call fits in what is
    // left (a call needs more than twice the guide's reserve).
    let (ok, stderr, got) = headless_with(
        "forecast",
        "[model]\ncontext_length = 400\n",
        &["--tool-choice", "required", "--yes"],
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("tool choice `required` not followed this turn")
            && stderr.contains("tokens are left in the context"),
        "{stderr}"
    );
    assert!(got.is_empty(), "no call was made: {got:?}");
}

#[test]
fn headless_without_yes_denies_and_says_so() {
    let (ok, stderr, got) = headless("forecast", &["--tool-choice", "required"]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("denied (run with --yes"), "{stderr}");
    assert!(got.is_empty(), "a denied call never runs: {got:?}");
}
