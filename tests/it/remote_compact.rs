//! `/compact` through the remote engine, against `gemma-chat serve` on the demo model: the older
//! exchanges are summarized by the server's model without a word of it shown, the conversation
//! goes on from the summary and the newest exchange, and the next turn is sent that way.

use std::time::Duration;

use gemma_engine::EngineHandle;
use gemma_engine::protocol::{Command, Event, OverflowMode, SUMMARY_LEAD, TabSettings};

use serde_json::Value;

use crate::common::chat::first_after_loading;

/// One turn of tab 1: its answer's text.
fn turn(h: &EngineHandle, text: &str) -> String {
    h.send(Command::Submit {
        tab: 1,
        text: text.into(),
        images: Vec::new(),
    });
    let mut answer = String::new();
    loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("an event")
        {
            Event::Token { text, .. } => answer.push_str(&text),
            Event::Finished { .. } => return answer,
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
}

#[test]
fn compact_summarizes_on_the_server_and_the_conversation_goes_on_from_the_summary() {
    // A context of 1,024 tokens as the server tells it: the summary gets an eighth of it.
    let running = crate::serve::server_telling(1024);
    let (port, passed) = crate::common::http::proxy(running.addr().port());
    let h = gemma_engine::spawn_remote(crate::common::remote_tools::options(
        format!("http://127.0.0.1:{port}"),
        None,
    ));
    assert!(matches!(first_after_loading(&h), Event::Ready { .. }));
    let settings = TabSettings {
        max_new_tokens: 8,
        ..TabSettings::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    // Nothing before the newest exchange: nothing to compact, said.
    turn(&h, "The capital of France is");
    h.send(Command::Compact { tab: 1 });
    let said = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(60))
            .expect("an event")
        {
            Event::Failed { error, .. } => break error,
            Event::Compacted { .. } => panic!("one exchange is not compacted"),
            _ => {}
        }
    };
    assert!(said.contains("nothing to compact"), "{said}");
    turn(&h, "The capital of Italy is");
    h.send(Command::Compact { tab: 1 });
    let report = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("an event")
        {
            Event::Compacted { report, .. } => break report,
            Event::Token { text, .. } => panic!("the summary is not shown: {text:?}"),
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    };
    assert_eq!(report.mode, OverflowMode::Compact);
    assert_eq!((report.summarized, report.kept, report.dropped), (1, 1, 0));
    assert_eq!(report.prompt, SUMMARY_LEAD);
    assert!(
        report.summary.as_ref().is_some_and(|s| !s.is_empty()),
        "{report:?}"
    );
    assert!(!report.resumes);
    // The next turn goes on from the summary and the kept exchange.
    let next = turn(&h, "And of Spain?");
    assert!(!next.is_empty());
    let chats: Vec<Value> = {
        let p = passed.lock().expect("passed");
        p.iter()
            .filter(|(line, _)| line.starts_with("POST /v1/chat/completions"))
            .map(|(_, body)| body.clone())
            .collect()
    };
    let users = |b: &Value| -> Vec<String> {
        let m = b["messages"].as_array().expect("messages");
        m.iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap_or("").to_string())
            .collect()
    };
    // The summary's request: the older exchange and the request for it, no tools.
    let summary = &chats[chats.len() - 2];
    assert_eq!(users(summary)[0], "The capital of France is");
    assert_eq!(users(summary).len(), 2, "{summary}");
    assert!(summary.get("tools").is_none());
    let last = users(&chats[chats.len() - 1]);
    assert_eq!(
        last,
        [SUMMARY_LEAD, "The capital of Italy is", "And of Spain?"]
    );
}
