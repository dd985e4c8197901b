//! The call grammar against the template's own writing (`format.rs`), against what it must
//! refuse, and through a vocabulary: random walks over the allowed tokens, finished by force,
//! always parse back to arguments that satisfy the schema.

use serde_json::{Map, Value, json};

use super::*;
use crate::syntax::format::{QUOTE, format_call};
use crate::syntax::parse::{CALL_CLOSE, parse_call};
use crate::syntax::vocab::Vocab;

fn weather() -> (String, Value) {
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "where"},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "detail": {"type": "object", "properties": {
                "hourly": {"type": "boolean"},
                "fields": {"type": "array", "items": {"type": "string"}, "minItems": 1}
            }, "required": ["fields"]},
            "ratio": {"type": ["number", "null"]}
        },
        "required": ["city", "unit"]
    });
    ("get_weather".into(), schema)
}

fn grammar() -> CallGrammar {
    let add = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]});
    CallGrammar::new(&[weather(), ("add".into(), add), ("now".into(), Value::Null)])
        .expect("compiles")
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

/// Whether `text` (the call's text, without the end token) is a complete call.
fn accepts(g: &CallGrammar, text: &str) -> bool {
    let mut m = g.matcher();
    m.advance_text(text) && m.advance(Sym::End) && m.is_done()
}

#[test]
fn what_the_template_writes_is_accepted() {
    let g = grammar();
    let calls = [
        ("get_weather", json!({"city": "Paris", "unit": "celsius"})),
        (
            "get_weather",
            json!({"city": "Zürich <b>", "unit": "fahrenheit", "days": 3, "ratio": null}),
        ),
        (
            "get_weather",
            json!({"city": "x", "unit": "celsius", "ratio": -1.5e3,
                                "detail": {"fields": ["a", "b"], "hourly": true}}),
        ),
        ("add", json!({"a": 1, "b": 2.25})),
        ("now", json!({})),
    ];
    for (name, args) in calls {
        let text = format_call(name, &obj(args.clone()));
        assert!(accepts(&g, &text), "{text}");
    }
}

#[test]
fn what_breaks_the_schema_is_refused() {
    let g = grammar();
    for bad in [
        "call:get_weathr{city:<|\"|>P<|\"|>,unit:<|\"|>celsius<|\"|>}",
        "call:get_weather{city:<|\"|>P<|\"|>}",
        "call:get_weather{city:<|\"|>P<|\"|>,unit:<|\"|>kelvin<|\"|>}",
        "call:get_weather{city:3,unit:<|\"|>celsius<|\"|>}",
        "call:get_weather{city:<|\"|>P<|\"|>,city:<|\"|>Q<|\"|>,unit:<|\"|>celsius<|\"|>}",
        "call:get_weather{city:<|\"|>P<|\"|>,unit:<|\"|>celsius<|\"|>,days:1.5}",
        "call:get_weather{city:<|\"|>P<|\"|>,unit:<|\"|>celsius<|\"|>,detail:{fields:[]}}",
        "call:get_weather{city:<|\"|>P<|\"|>,unit:<|\"|>celsius<|\"|>,extra:1}",
        "call:add{a:1}",
        "call:now{x:1}",
    ] {
        assert!(!accepts(&g, bad), "accepted {bad}");
    }
}

#[test]
fn a_completion_finishes_any_prefix() {
    let g = grammar();
    let full = format_call(
        "get_weather",
        &obj(
            json!({"city": "Zü", "unit": "celsius", "days": 12, "ratio": 0.5,
                    "detail": {"fields": ["q"], "hourly": false}}),
        ),
    );
    let syms = crate::syntax::matcher::text_syms(&full);
    for cut in 0..=syms.len() {
        let mut m = g.matcher();
        assert!(m.advance_all(&syms[..cut]));
        let rest = m
            .completion()
            .unwrap_or_else(|| panic!("no completion after {cut}"));
        assert_eq!(rest.last(), Some(&Sym::End));
        assert!(m.advance_all(&rest) && m.is_done(), "cut {cut}");
    }
}

/// Longer pieces of the test vocabulary, after its 2 special and 256 byte tokens.
const EXTRA: [&str; 14] = [
    "call:",
    "get",
    "_weather",
    "city",
    "unit",
    "celsius",
    "fahrenheit",
    "{",
    "}:",
    ",",
    "12",
    "ab",
    "é",
    "\u{1F600}",
];

/// A byte-level vocabulary with some longer pieces, plus the quote (0) and end (1) tokens.
fn vocab() -> (Vocab, u32, u32) {
    let mut pieces: Vec<Option<Vec<u8>>> = vec![None, None];
    pieces.extend((0..=255u8).map(|b| Some(vec![b])));
    pieces.extend(EXTRA.iter().map(|w| Some(w.as_bytes().to_vec())));
    let (quote, end) = (0, 1);
    (Vocab::new(pieces, quote, end), quote, end)
}

/// A pseudo-random walk of at most `steps` allowed tokens, then the forced completion: the
/// text of the call (quote and end tokens written out).
fn walk(v: &Vocab, g: &CallGrammar, seed: u64, steps: usize, ids: (u32, u32)) -> String {
    let mut m = g.matcher();
    let mut text = Vec::new();
    let mut state = seed;
    for step in 0..steps + 10_000 {
        if m.is_done() {
            break;
        }
        let allowed = if step < steps {
            v.allowed(&m)
        } else {
            v.forced(&m)
        };
        assert!(
            !allowed.is_empty(),
            "a dead end after {:?}",
            String::from_utf8_lossy(&text)
        );
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = allowed[(state >> 33) as usize % allowed.len()];
        assert!(v.feed(&mut m, id));
        match id {
            i if i == ids.0 => text.extend_from_slice(QUOTE.as_bytes()),
            i if i == ids.1 => text.extend_from_slice(CALL_CLOSE.as_bytes()),
            i if i < 258 => text.push((i - 2) as u8),
            i => text.extend_from_slice(EXTRA[(i - 258) as usize].as_bytes()),
        }
    }
    assert!(m.is_done());
    String::from_utf8(text).expect("calls are UTF-8")
}

#[test]
fn random_walks_always_end_in_a_valid_call() {
    let g = grammar();
    let (v, quote, end) = vocab();
    for seed in 0..200u64 {
        let text = walk(&v, &g, seed, (seed % 40) as usize, (quote, end));
        let call = parse_call(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        match call.name.as_str() {
            "get_weather" => {
                assert!(call.arguments["city"].is_string(), "{text}");
                let unit = call.arguments["unit"].as_str();
                assert!(matches!(unit, Some("celsius" | "fahrenheit")), "{text}");
                if let Some(d) = call.arguments.get("days") {
                    assert!(d.is_i64() || d.is_u64(), "{text}");
                }
                if let Some(d) = call.arguments.get("detail") {
                    assert!(
                        !d["fields"].as_array().expect("fields").is_empty(),
                        "{text}"
                    );
                }
            }
            "add" => assert!(
                call.arguments["a"].is_number() && call.arguments["b"].is_number(),
                "{text}"
            ),
            "now" => assert!(call.arguments.is_empty(), "{text}"),
            other => panic!("undeclared tool {other}"),
        }
    }
}

#[test]
fn inside_a_string_the_vocabulary_answers_by_state() {
    let g = grammar();
    let (v, quote, _) = vocab();
    let mut m = g.matcher();
    assert!(m.advance_text("call:add{a:"));
    assert!(!v.allowed(&m).contains(&quote), "a number, not a string");
    let mut m = g.matcher();
    assert!(m.advance_text("call:get_weather{city:<|\"|>"));
    let allowed = v.allowed(&m);
    assert!(allowed.contains(&quote) && allowed.contains(&(2 + b'a' as u32)));
    // Half a character: only its continuation bytes, never the quote.
    assert!(m.advance(Sym::Byte(0xC3)));
    let allowed = v.allowed(&m);
    assert!(
        !allowed.contains(&quote)
            && allowed.contains(&(2 + 0xA9))
            && !allowed.contains(&(2 + b'a' as u32))
    );
}

#[test]
fn bad_declarations_are_named() {
    assert!(matches!(CallGrammar::new(&[]), Err(GrammarError::NoTools)));
    let dup = [
        ("f".to_string(), Value::Null),
        ("f".to_string(), Value::Null),
    ];
    assert!(matches!(
        CallGrammar::new(&dup),
        Err(GrammarError::Duplicate(_))
    ));
    let bad = [("a b".to_string(), Value::Null)];
    assert!(matches!(
        CallGrammar::new(&bad),
        Err(GrammarError::BadName(_))
    ));
    let not_obj = [("f".to_string(), json!({"type": "string"}))];
    assert!(matches!(
        CallGrammar::new(&not_obj),
        Err(GrammarError::Schema { .. })
    ));
}
