//! Compiling and rendering a chat template: errors with their line, the limits, BOS, tools.

use super::*;

fn compile(text: &str) -> Result<ChatTemplate, TemplateError> {
    let source = TemplateSource {
        text: text.into(),
        origin: "test.jinja".into(),
    };
    ChatTemplate::new(&source, "<bos>", "<eos>")
}

#[test]
fn errors_name_the_template_and_the_line() {
    let e = compile("a\n{% if %}").expect_err("does not compile");
    assert_eq!(e.line, Some(2));
    assert!(
        e.to_string()
            .starts_with("the chat template (test.jinja) does not compile")
    );
    let t = compile("x\ny\n{{ raise_exception('roles must alternate') }}").expect("ok");
    let e = t
        .render(&serde_json::json!([]), true, None, None)
        .expect_err("raises");
    assert_eq!(e.line, Some(3));
    assert!(e.to_string().contains("roles must alternate"), "{e}");
    assert!(e.to_string().ends_with("(line 3)"), "{e}");
}

#[test]
fn output_is_bounded() {
    let t = compile("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}").expect("compiles");
    let e = t
        .render(&serde_json::json!([]), true, None, None)
        .expect_err("too big");
    assert!(e.what.contains("MiB"), "{e}");
}

#[test]
fn memory_is_bounded() {
    // Each doubling is one instruction: fuel cannot stop this, the child's limit does.
    let doubling = "{% set ns = namespace(s='x') %}{% for i in range(64) %}\
                    {% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}";
    let replacing = "{% set ns = namespace(s='x') %}{% for i in range(64) %}\
                     {% set ns.s = ns.s|replace('x', 'xxxxxxxx') %}{% endfor %}";
    for source in [doubling, replacing] {
        let t = compile(source).expect("compiles");
        let started = std::time::Instant::now();
        let e = t
            .render(&serde_json::json!([]), true, None, None)
            .expect_err("too big");
        assert!(
            e.what.contains("MiB of memory"),
            "{source}: {e} after {:?}",
            started.elapsed()
        );
        assert_eq!(e.origin, "test.jinja");
    }
    // The same process renders on.
    let t = compile("{{ messages[0].content }}").expect("ok");
    let m = serde_json::json!([{"role": "user", "content": "still here"}]);
    assert_eq!(
        t.render(&m, true, None, None).expect("renders"),
        "still here"
    );
}

#[test]
fn bos_is_left_to_the_engine() {
    let t = compile("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}").expect("ok");
    let m = serde_json::json!([{"role": "user", "content": "hi"}]);
    assert_eq!(
        t.render(&m, true, None, None).expect("renders"),
        "<bos>hi<eos>"
    );
    assert_eq!(
        t.render_after_bos(&m, true, None, None).expect("renders"),
        "hi<eos>"
    );
}

#[test]
fn tools_reach_the_template_as_transformers_passes_them() {
    // Rendered in the sandbox: the tools cross to it with the messages.
    let t = compile(
        "{{ tools is none }}|{% for t in tools or [] %}{{ t['function']['name'] }};{% endfor %}",
    )
    .expect("compiles");
    let m = serde_json::json!([]);
    assert_eq!(t.render(&m, true, None, None).expect("renders"), "True|");
    let tools = serde_json::json!([
        {"type": "function", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "g"}},
    ]);
    assert_eq!(
        t.render(&m, true, None, Some(&tools)).expect("renders"),
        "False|f;g;"
    );
    for bad in [serde_json::json!({"name": "f"}), serde_json::json!(["f"])] {
        let e = t.render(&m, true, None, Some(&bad)).expect_err("refused");
        assert!(e.what.contains("JSON schemas"), "{e}");
    }
}
