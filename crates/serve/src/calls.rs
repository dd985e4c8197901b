//! Tools as the API declares them ([`tools`]: `tools`, `tool_choice`), bounded as the app bounds
//! a server's; `response_format` as a tool the answer must call ([`response_format`]), so the
//! call grammar constrains the JSON; and the [`CallBook`]: each call the model made, by the id
//! the client got, as the model wrote it, so that a client sending the call back gives the
//! engine the very ids it sampled.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value};

use crate::error::ApiError;
use gemma_protocol::{ClientTool, ToolChoice};

/// The most tools one request may declare.
pub(crate) const MAX_TOOLS: usize = 64;
/// The longest tool name (OpenAI's bound too).
const MAX_NAME: usize = 64;

/// A request's tools and what it asks of them.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Tools {
    /// Declared to the model (only the named one when `tool_choice` names one).
    pub declared: Vec<ClientTool>,
    pub choice: ToolChoice,
}

/// `tools` and `tool_choice` (the older `functions` is refused by name).
pub(crate) fn tools(o: &Map<String, Value>) -> Result<Tools, ApiError> {
    let mut declared = Vec::new();
    let list = match o.get("tools") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid("tools", "an array of functions")),
    };
    if list.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            "tools",
            format!("{} tools: at most {MAX_TOOLS}", list.len()),
        ));
    }
    for (i, t) in list.iter().enumerate() {
        let tool = function(t, &format!("tools[{i}]"))?;
        if declared.iter().any(|d: &ClientTool| d.name == tool.name) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                format!("`{}` is declared twice", tool.name),
            ));
        }
        declared.push(tool);
    }
    let choice = match o.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => ToolChoice::parse(s).ok_or_else(|| {
            ApiError::invalid("tool_choice", "auto, none, required or a function")
        })?,
        Some(v) => {
            let name = v.pointer("/function/name").and_then(Value::as_str);
            let Some(name) = name.filter(|_| v["type"] == "function") else {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "auto, none, required or {\"type\": \"function\", \"function\": {\"name\": …}}",
                ));
            };
            if !declared.iter().any(|d| d.name == name) {
                return Err(ApiError::invalid(
                    "tool_choice.function.name",
                    format!("`{name}` is not one of `tools`"),
                ));
            }
            // The one named is the one the model may call, and must.
            declared.retain(|d| d.name == name);
            ToolChoice::Required
        }
    };
    if choice == ToolChoice::Required && declared.is_empty() {
        return Err(ApiError::invalid(
            "tool_choice",
            "`required` needs at least one tool in `tools`",
        ));
    }
    if o.get("functions").is_some_and(|f| !f.is_null()) {
        return Err(ApiError::invalid(
            "functions",
            "the deprecated `functions` is not served: declare them in `tools`",
        ));
    }
    Ok(Tools { declared, choice })
}

/// The tool a JSON answer is written through (`response_format`).
pub(crate) const JSON_ANSWER: &str = "json_answer";

/// A JSON answer asked for: the tool that carries it, and whether its value is wrapped (a schema
/// whose root is not an object is asked as `{"value": …}`, and unwrapped).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonFormat {
    pub tool: ClientTool,
    pub wrapped: bool,
}

/// `response_format`: `text` (nothing to do), `json_object` or `json_schema`.
pub(crate) fn response_format(o: &Map<String, Value>) -> Result<Option<JsonFormat>, ApiError> {
    let Some(f) = o.get("response_format").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let schema = match f.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => serde_json::json!({"type": "object"}),
        Some("json_schema") => f
            .pointer("/json_schema/schema")
            .filter(|s| s.is_object())
            .cloned()
            .ok_or_else(|| {
                ApiError::invalid("response_format.json_schema.schema", "a JSON schema object")
            })?,
        _ => {
            return Err(ApiError::invalid(
                "response_format.type",
                "text, json_object or json_schema",
            ));
        }
    };
    let wrapped = schema.get("type").and_then(Value::as_str) != Some("object");
    let parameters = match wrapped {
        true => serde_json::json!({"type": "object", "properties": {"value": schema},
                                   "required": ["value"]}),
        false => schema,
    };
    Ok(Some(JsonFormat {
        tool: ClientTool {
            name: JSON_ANSWER.into(),
            description: "Gives the answer as JSON: its arguments are the answer.".into(),
            parameters: parameters.to_string(),
        },
        wrapped,
    }))
}

/// One `{"type": "function", "function": {...}}`.
fn function(t: &Value, at: &str) -> Result<ClientTool, ApiError> {
    if t["type"] != "function" {
        return Err(ApiError::invalid(
            format!("{at}.type"),
            "only \"function\" tools are served",
        ));
    }
    let f = t
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::invalid(format!("{at}.function"), "must be an object"))?;
    let name = f.get("name").and_then(Value::as_str).unwrap_or("");
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(valid) {
        return Err(ApiError::invalid(
            format!("{at}.function.name"),
            "1 to 64 of a-z, A-Z, 0-9, _ and -",
        ));
    }
    let description = match f.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                format!("{at}.function.description"),
                "must be a string",
            ));
        }
    };
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                format!("{at}.function.parameters"),
                "must be a JSON schema object",
            ));
        }
    };
    Ok(ClientTool {
        name: name.to_string(),
        description,
        parameters: parameters.to_string(),
    })
}

/// Calls by the id their client was given: their arguments as sent and the call as the model
/// wrote it. Bounded: the oldest are forgotten first (a call the book no longer holds is
/// written again from its arguments, as the chat template writes one).
#[derive(Debug, Default)]
pub(crate) struct CallBook {
    by_id: HashMap<String, (String, String)>,
    order: VecDeque<String>,
}

/// Calls the book keeps.
const BOOK: usize = 4096;

impl CallBook {
    /// Keeps call `id` with its `arguments` and the model's `written` text.
    pub fn keep(&mut self, id: &str, arguments: &str, written: &str) {
        if self.order.len() == BOOK
            && let Some(old) = self.order.pop_front()
        {
            self.by_id.remove(&old);
        }
        self.order.push_back(id.to_string());
        self.by_id
            .insert(id.to_string(), (arguments.to_string(), written.to_string()));
    }

    /// How the model wrote call `id`, when the client sends it back with the arguments it got.
    pub fn written(&self, id: &str, arguments: &str) -> Option<String> {
        self.by_id
            .get(id)
            .filter(|(a, _)| a == arguments)
            .map(|(_, w)| w.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Tools, ApiError> {
        tools(v.as_object().expect("object"))
    }

    #[test]
    fn tools_and_a_named_choice() {
        let weather = json!({"type": "function", "function": {"name": "weather",
            "description": "Weather now", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
        let time = json!({"type": "function", "function": {"name": "time"}});
        let t = parse(json!({"tools": [weather, time]})).expect("valid");
        assert_eq!(t.declared.len(), 2);
        assert_eq!(t.choice, ToolChoice::Auto);
        assert!(t.declared[1].parameters.contains("\"object\""));
        let named = json!({"tools": [weather, time],
                           "tool_choice": {"type": "function", "function": {"name": "time"}}});
        let t = parse(named).expect("valid");
        assert_eq!(
            (t.declared.len(), t.declared[0].name.as_str(), t.choice),
            (1, "time", ToolChoice::Required)
        );
    }

    #[test]
    fn each_wrong_tool_is_named() {
        let f = |name: &str| json!({"type": "function", "function": {"name": name}});
        let cases = [
            (json!({"tools": {}}), "tools"),
            (json!({"tools": [f("a b")]}), "tools[0].function.name"),
            (json!({"tools": [f("a"), f("a")]}), "tools[1].function.name"),
            (
                json!({"tools": [{"type": "code", "function": {"name": "a"}}]}),
                "tools[0].type",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "a",
                                  "parameters": []}}]}),
                "tools[0].function.parameters",
            ),
            (
                json!({"tools": [f("a")], "tool_choice": "maybe"}),
                "tool_choice",
            ),
            (
                json!({"tools": [f("a")], "tool_choice": {"type": "function",
                                                          "function": {"name": "b"}}}),
                "tool_choice.function.name",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"functions": [f("a")]}), "functions"),
        ];
        for (body, field) in cases {
            let e = parse(body.clone()).expect_err("refused");
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
        let many: Vec<Value> = (0..=MAX_TOOLS).map(|i| f(&format!("t{i}"))).collect();
        assert!(parse(json!({ "tools": many })).is_err());
    }

    #[test]
    fn a_json_answer_is_a_tool_of_its_schema_wrapped_when_its_root_is_no_object() {
        let f = |v: Value| response_format(v.as_object().expect("object"));
        assert_eq!(
            f(json!({"response_format": {"type": "text"}})).expect("ok"),
            None
        );
        let any = f(json!({"response_format": {"type": "json_object"}}))
            .expect("ok")
            .expect("json");
        assert!(!any.wrapped);
        assert_eq!(any.tool.name, JSON_ANSWER);
        let list = json!({"type": "array", "items": {"type": "integer"}});
        let schema = json!({"response_format": {"type": "json_schema",
                            "json_schema": {"name": "n", "schema": list}}});
        let wrapped = f(schema).expect("ok").expect("json");
        assert!(wrapped.wrapped);
        let p: Value = serde_json::from_str(&wrapped.tool.parameters).expect("json");
        assert_eq!(p["properties"]["value"], list);
        let e = f(json!({"response_format": {"type": "json_schema", "json_schema": {}}}));
        assert_eq!(
            e.expect_err("no schema").param.as_deref(),
            Some("response_format.json_schema.schema")
        );
    }

    #[test]
    fn the_book_gives_back_what_the_model_wrote_for_the_arguments_it_sent() {
        let mut b = CallBook::default();
        b.keep("call_1", r#"{"a":1}"#, "call:f{a:1}");
        assert_eq!(
            b.written("call_1", r#"{"a":1}"#).as_deref(),
            Some("call:f{a:1}")
        );
        // Arguments the client changed are written again from themselves.
        assert_eq!(b.written("call_1", r#"{"a":2}"#), None);
        for i in 0..BOOK {
            b.keep(&format!("c{i}"), "{}", "w");
        }
        assert_eq!(
            b.written("call_1", r#"{"a":1}"#),
            None,
            "the oldest forgotten"
        );
        assert!(b.written("c1", "{}").is_some());
    }
}
