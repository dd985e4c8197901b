//! The official Gemma chat templates render byte for byte as transformers renders them (the
//! references come from jinja2 in transformers' environment: tests/fixtures/templates/
//! make_references.py), through the library and through `gemma-chat template render`.

use std::path::{Path, PathBuf};
use std::process::Command;

use gemma_model::tokenizer::template::{ChatTemplate, TemplateSource};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates")
}

fn read_json(name: &str) -> Value {
    let text = std::fs::read_to_string(dir().join(name)).expect("fixture");
    serde_json::from_str(&text).expect("json")
}

fn conversation(name: &str) -> Value {
    read_json("conversations.json")
        .as_array()
        .expect("list")
        .iter()
        .find(|c| c["name"] == name)
        .expect("conversation")["messages"]
        .clone()
}

fn template(name: &str) -> ChatTemplate {
    let path = dir().join("official").join(name);
    let source = TemplateSource {
        text: std::fs::read_to_string(&path).expect("template"),
        origin: name.into(),
    };
    ChatTemplate::new(&source, "<bos>", "<eos>").expect("compiles")
}

#[test]
fn official_templates_render_as_transformers_does() {
    let refs = read_json("references.json");
    let refs = refs.as_array().expect("list");
    assert!(refs.len() >= 90, "{} references", refs.len());
    let mut rendered = 0;
    for case in refs {
        let name = case["template"].as_str().expect("name");
        let t = template(name);
        let conv = case["conversation"].as_str().expect("conversation");
        let thinking = case["thinking"].as_bool().expect("bool");
        let got = t.render(&conversation(conv), true, Some(thinking));
        match (&case["render"], got) {
            (Value::String(want), Ok(got)) => {
                assert_eq!(&got, want, "{name} / {conv} / thinking {thinking}");
                rendered += 1;
            }
            (Value::Null, Err(e)) => {
                let want = case["error"].as_str().expect("error");
                let message = want.split_once(": ").map_or(want, |(_, m)| m);
                assert!(
                    e.to_string().contains(message.trim_end_matches('.')),
                    "{name} / {conv}: {e} vs {want}"
                );
            }
            (want, got) => panic!("{name} / {conv} / thinking {thinking}: {want:?} vs {got:?}"),
        }
    }
    assert!(rendered >= 70, "{rendered} renders compared");
}

#[test]
fn the_official_gemma4_template_writes_what_the_docs_say() {
    // The failure that started this: one user message through the current official template.
    let t = template("gemma4-31b-it.jinja");
    let one = conversation("one_user_turn");
    assert_eq!(
        t.render(&one, true, Some(false)).expect("renders"),
        "<bos><|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    );
    assert_eq!(
        t.render(&one, true, Some(true)).expect("renders"),
        "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n"
    );
}

fn render_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .args(["template", "render"])
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn template_render_prints_exactly_the_render() {
    let tmp = tempfile::tempdir().expect("tmp");
    let refs = read_json("references.json");
    for (tpl, conv, thinking) in [
        ("gemma4-31b-it.jinja", "system_and_four_turns", true),
        ("gemma4-31b-it.jinja", "past_thoughts", false),
        (
            "gemma4-31b-it-interleaved.jinja",
            "tool_call_and_response",
            false,
        ),
        ("gemma3-it.jinja", "system_and_user", false),
        ("gemma2-2b-it.jinja", "whitespace_quotes_and_unicode", false),
    ] {
        let messages = tmp.path().join(format!("{conv}.json"));
        std::fs::write(&messages, conversation(conv).to_string()).expect("write");
        let template = dir().join("official").join(tpl);
        let mut args = vec![
            "--template",
            template.to_str().expect("utf-8"),
            "--messages",
            messages.to_str().expect("utf-8"),
        ];
        if thinking {
            args.push("--thinking");
        }
        // Without --raw, what a terminal must not get is left out; with it, every byte.
        let cleaned = render_cli(&args);
        args.push("--raw");
        let out = render_cli(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = refs
            .as_array()
            .expect("list")
            .iter()
            .find(|c| {
                c["template"] == tpl && c["conversation"] == conv && c["thinking"] == thinking
            })
            .expect("reference")["render"]
            .as_str()
            .expect("render")
            .to_string();
        assert_eq!(
            String::from_utf8(cleaned.stdout).expect("utf-8"),
            gemma_engine::protocol::text::printable(&want),
            "{tpl} / {conv}, cleaned"
        );
        assert_eq!(
            String::from_utf8(out.stdout).expect("utf-8"),
            want,
            "{tpl} / {conv}"
        );
    }
}

#[test]
fn template_render_explains_bad_input() {
    let tmp = tempfile::tempdir().expect("tmp");
    let template = dir().join("official/gemma3-it.jinja");
    let render = |json: &str| {
        let messages = tmp.path().join("m.json");
        std::fs::write(&messages, json).expect("write");
        let out = render_cli(&[
            "--template",
            template.to_str().expect("utf-8"),
            "--messages",
            messages.to_str().expect("utf-8"),
        ]);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(render(r#"{"role": "user"}"#).contains("JSON list of messages"));
    let err = render(r#"[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]"#);
    assert!(err.contains("Conversation roles must alternate"), "{err}");
    assert!(err.contains("(line "), "{err}");
}
