//! The lenient parser on the template's own output (round trips through `format.rs`) and on the
//! variants models and servers send.

use serde_json::{Value, json};

use super::*;
use crate::syntax::format::format_call;

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn parsed(text: &str) -> ParsedCall {
    parse_call(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn what_format_writes_parses_back() {
    let cases = [
        json!({}),
        json!({"city": "Paris", "days": 3, "metric": true}),
        json!({"q": "a, b: {c} [d]", "x": null, "f": 1.5, "tiny": 0.00001, "big": 1e16}),
        json!({"nested": {"list": [1, "two", [3.0, false], {"k": null}], "e": {}}, "n": -7}),
        json!({"text": "line one\nline \"two\" 'three'", "unicode": "héllo — 日本"}),
        json!({"u": 18446744073709551615u64, "neg": -0.0}),
    ];
    for v in cases {
        let a = args(v);
        let text = format!("<|tool_call>{}<tool_call|>", format_call("tool_x", &a));
        let call = parsed(&text);
        assert_eq!(call.name, "tool_x");
        assert_eq!(Value::Object(call.arguments), Value::Object(a), "{text}");
    }
}

#[test]
fn json_strings_keys_and_arguments_are_accepted() {
    let want = args(json!({"a": 1, "b": "x\ny"}));
    for text in [
        r#"call:f{"a":1,"b":"x\ny"}"#,
        r#"call:f{{"a":1,"b":"x\ny"}}"#,
        r#"call:f{ { "a" : 1 , "b" : "x\ny" } }"#,
        r#"call:f{<|"|>{"a":1,"b":"x\ny"}<|"|>}"#,
        r#"call:f{"{\"a\":1,\"b\":\"x\\ny\"}"}"#,
        r#"{"name":"f","arguments":{"a":1,"b":"x\ny"}}"#,
        r#"{"name":"f","arguments":"{\"a\":1,\"b\":\"x\\ny\"}"}"#,
        "call:f{<|\"|>a<|\"|>:1,'b':<|\"|>x\ny<|\"|>}",
    ] {
        let call = parsed(text);
        assert_eq!(call.name, "f", "{text}");
        assert_eq!(call.arguments, want, "{text}");
    }
}

#[test]
fn trailing_commas_whitespace_bare_words_and_python_keywords() {
    let call =
        parsed(" <|tool_call> call: get_weather { city : Paris , unit:celsius, days: 3, }\n");
    assert_eq!(call.name, "get_weather");
    assert_eq!(
        call.arguments,
        args(json!({"city": "Paris", "unit": "celsius", "days": 3}))
    );
    let call =
        parsed("call:f{a:None,b:null,c:True,d:False,e:[1,2,],f:1e-05,g:inf,h:http://x.y/z?q=1}");
    assert_eq!(
        call.arguments,
        args(
            json!({"a": null, "b": null, "c": true, "d": false, "e": [1, 2], "f": 0.00001,
            "g": "inf", "h": "http://x.y/z?q=1"})
        )
    );
}

#[test]
fn missing_closers_at_the_end_and_calls_without_braces() {
    assert_eq!(
        parsed("call:f{a:<|\"|>x<|\"|>,b:[1,{c:2").arguments,
        args(json!({"a": "x", "b": [1, {"c": 2}]}))
    );
    let call = parsed("<|tool_call>call:now<tool_call|><|tool_response>");
    assert_eq!(call.name, "now");
    assert!(call.arguments.is_empty());
}

#[test]
fn malformed_calls_are_typed_errors() {
    assert_eq!(
        parse_call("  <|tool_call><tool_call|>"),
        Err(ParseError::Empty)
    );
    assert!(matches!(
        parse_call("get_weather{}"),
        Err(ParseError::NotACall { .. })
    ));
    assert_eq!(parse_call("call:{a:1}"), Err(ParseError::MissingName));
    assert_eq!(
        parse_call("call:f{a:<|\"|>open}"),
        Err(ParseError::UnterminatedString { offset: 9 })
    );
    assert!(matches!(
        parse_call("call:f{a 1}"),
        Err(ParseError::Expected { offset: 10, .. })
    ));
    assert!(matches!(
        parse_call("call:f{a:1} extra"),
        Err(ParseError::Expected { .. })
    ));
    let deep = format!("call:f{{a:{}", "[".repeat(200));
    assert_eq!(parse_call(&deep), Err(ParseError::TooDeep));
}

#[test]
fn every_call_in_a_text_is_found() {
    let text = "Let me check.<|tool_call>call:a{x:<|\"|>not <tool_call|> here<|\"|>}<tool_call|>\
                <|tool_call>call:b{}<tool_call|><|tool_call>call:c{y:1<|tool_response>";
    let calls = parse_calls(text);
    assert_eq!(calls.len(), 3);
    let a = calls[0].as_ref().expect("a parses");
    assert_eq!(a.name, "a");
    assert_eq!(a.arguments, args(json!({"x": "not <tool_call|> here"})));
    assert_eq!(calls[1].as_ref().expect("b parses").name, "b");
    let c = calls[2].as_ref().expect("c parses");
    assert_eq!(
        (c.name.as_str(), &c.arguments),
        ("c", &args(json!({"y": 1})))
    );
    assert!(parse_calls("no calls here").is_empty());
}
