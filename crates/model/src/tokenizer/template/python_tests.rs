//! Rendering against jinja2's bytes: Python's methods, `str()`, `tojson`, `strftime`, limits.

use super::*;

fn render(source: &str, ctx: Value) -> String {
    let env = environment();
    env.render_str(source, ctx).expect("renders")
}

#[test]
fn values_print_as_python_prints_them() {
    let ctx = Value::from_serialize(serde_json::json!({
        "n": null, "t": true, "f": 2.5, "big": 1e20, "small": 1.5e-7, "whole": 3.0,
        "i": 7, "l": ["a", 1, null, "it's"], "d": {"k": false}
    }));
    let got = render(
        "{{ n }}|{{ t }}|{{ f }}|{{ big }}|{{ small }}|{{ whole }}|{{ i }}|{{ l }}|{{ d }}|{{ missing }}",
        ctx,
    );
    assert_eq!(
        got,
        "None|True|2.5|1e+20|1.5e-07|3.0|7|['a', 1, None, \"it's\"]|{'k': False}|"
    );
}

#[test]
fn tojson_is_json_dumps() {
    let ctx = Value::from_serialize(serde_json::json!({
        "x": {"b": [1, 2.0, "é<>\n"], "a": null, "c": {}}
    }));
    assert_eq!(
        render("{{ x | tojson }}", ctx.clone()),
        r#"{"b": [1, 2.0, "é<>\n"], "a": null, "c": {}}"#
    );
    assert_eq!(
        render("{{ x | tojson(indent=2, sort_keys=true) }}", ctx.clone()),
        "{\n  \"a\": null,\n  \"b\": [\n    1,\n    2.0,\n    \"é<>\\n\"\n  ],\n  \"c\": {}\n}"
    );
    assert_eq!(
        render("{{ x.b | tojson(ensure_ascii=true) }}", ctx),
        r#"[1, 2.0, "\u00e9<>\n"]"#
    );
}

#[test]
fn python_methods_and_whitespace() {
    let ctx = Value::from_serialize(serde_json::json!({
        "m": {"role": "user", "content": "\u{1c} a<sep>b \t"}
    }));
    let src = "{{ m.get('role') }}|{{ m.get('x', 'd') }}|{{ m.content.strip() }}|\
               {{ m.content | trim }}|{{ m.content.split('<sep>') | length }}|\
               {{ 'a  b '.split() }}|{{ m.content.strip(' \t').startswith('\u{1c}') }}|\
               {% for k, v in m.items() %}{{ k }}={{ v | length }};{% endfor %}|\
               {{ 'x' is sequence }}{{ {} is sequence }}";
    assert_eq!(
        render(src, ctx),
        "user|d|a<sep>b|a<sep>b|2|['a', 'b']|True|role=4;content=11;|TrueTrue"
    );
}

#[test]
fn loop_controls_and_raise_exception() {
    let env = environment();
    let out = env
        .render_str(
            "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
            (),
        )
        .expect("renders");
    assert_eq!(out, "02");
    let e = env
        .render_str("{{ raise_exception('roles must alternate') }}", ())
        .expect_err("raises");
    assert!(e.to_string().contains("roles must alternate"), "{e}");
}

#[test]
fn generation_tags_render_their_body() {
    let src = "a {%- generation -%} b {%- endgeneration %} c{% if x %}{% endif %}";
    assert_eq!(
        without_generation_tags(src),
        "a {%- if true -%} b {%- endif %} c{% if x %}{% endif %}"
    );
    assert_eq!(
        render(&without_generation_tags(src), Value::UNDEFINED),
        "ab c"
    );
}

#[test]
fn runaway_templates_run_out_of_fuel() {
    let env = environment();
    let e = env
        .render_str(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            (),
        )
        .expect_err("stops");
    assert_eq!(e.kind(), ErrorKind::OutOfFuel);
}

#[test]
fn strftime_matches_known_dates() {
    // 2026-12-01 10:33:07 UTC was a Tuesday.
    let t = 1_796_121_187;
    assert_eq!(
        strftime::strftime("%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %I%p %-d %%", t),
        "2026-12-01 10:33:07 Tue Tuesday Dec December 335 26 10AM 1 %"
    );
    assert_eq!(strftime::strftime("%d %b %Y", 951_782_400), "29 Feb 2000");
}

/// Found by tests/fuzz.rs: `{%}` (the opening and closing overlap) is left to the parser to
/// refuse instead of slicing backwards.
#[test]
fn an_overlapping_tag_does_not_panic() {
    assert_eq!(without_generation_tags("a{%}b"), "a{%}b");
    // As jinja2 lexes it: the block opened by `{%` runs to the next `%}`.
    assert_eq!(
        without_generation_tags("{%} x %}{% generation %}y{% endgeneration %}"),
        "{%} x %}{% if true %}y{% endif %}"
    );
}

#[test]
fn tool_schemas_render_as_jinja2_renders_them() {
    let ctx = Value::from_serialize(serde_json::json!({
        "t": ["string", "null"], "n": null,
        "d": {"b": 1, "Ünder": 2, "über": 3, "B": 4, "a": 5}
    }));
    // `upper` is Python's `str(x).upper()`; `dictsort` folds case as `str.lower()` does and
    // keeps ties in the dict's order; a loop's filter counts for `loop.first`.
    let src = "{{ t | upper }}|{{ missing | upper }}|{{ n | upper }}|{{ t | map('upper') | list }}|\
               {% for k, v in d | dictsort %}{{ k }}{% endfor %}|\
               {% for k, v in d | dictsort(reverse=true) %}{{ k }}{% endfor %}|\
               {% for k, v in d | dictsort(by='value') %}{{ v }}{% endfor %}|\
               {% for k, v in d | dictsort(case_sensitive=true) %}{{ k }}{% endfor %}|\
               {% for x in t if x != 'string' %}{{ loop.first }}{{ x }}{% endfor %}|\
               {% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|\
               {{ n is iterable }}{{ missing is iterable }}{{ d is iterable }}{{ 1 is iterable }}";
    assert_eq!(
        render(src, ctx),
        "['STRING', 'NULL']||NONE|['STRING', 'NULL']|abBüberÜnder|ÜnderüberbBa|12345|\
         BabÜnderüber|Truenull|1|FalseTrueTrueFalse"
    );
}

#[test]
fn a_missing_method_is_reported_in_jinja2_words() {
    let env = environment();
    for (src, want) in [
        (
            "{{ 'x'.get('type') }}",
            "'str object' has no attribute 'get'",
        ),
        ("{{ none.strip() }}", "'None' has no attribute 'strip'"),
        (
            "{{ {'a': 1}.nope() }}",
            "'dict object' has no attribute 'nope'",
        ),
    ] {
        let e = env.render_str(src, ()).expect_err("fails");
        assert!(e.to_string().contains(want), "{src}: {e}");
    }
}
