//! A `tools/list` answer nested too deep to read, made readable without losing its other tools:
//! each member of a listed tool (its `inputSchema`, say) nested deeper than [`MAX_DEPTH`] is
//! replaced by [`TOO_DEEP`], which the schema check refuses by name, so that only that tool is
//! skipped, with the reason, and the server keeps the rest. A byte scan: the message cannot be
//! parsed as it is (that is the point).

use super::guard::MAX_DEPTH;

/// What stands in for a member nested too deep; `clean::schema` refuses a schema holding it.
pub const TOO_DEEP: &str = r#"{"x-gemma-chat-too-deep":true}"#;
/// The key of [`TOO_DEEP`].
pub const TOO_DEEP_KEY: &str = "x-gemma-chat-too-deep";

/// One open container: an object (the last key read in it, and whether a key comes next) or
/// an array.
enum Frame {
    Object { key: Vec<u8>, wants_key: bool },
    Array,
}

impl Frame {
    /// Whether a string read now is a key (an object's, after `{` or `,`).
    fn wants_key(&self) -> bool {
        matches!(
            self,
            Frame::Object {
                wants_key: true,
                ..
            }
        )
    }
}

/// `message` with the too-deep members of its `result.tools` entries replaced; `None` when it
/// is no such answer, or is still too deep after.
pub fn prune_tools(message: &[u8]) -> Option<Vec<u8>> {
    let mut stack: Vec<Frame> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    let mut key: Option<Vec<u8>> = None;
    // The member value being watched: where it starts and how deep it goes.
    let mut watched: Option<(usize, usize)> = None;
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for (i, &b) in message.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                (false, c) => {
                    if let Some(k) = key.as_mut() {
                        k.push(c);
                    }
                }
            }
            if !in_string
                && let Some(k) = key.take()
                && let Some(Frame::Object { key, .. }) = stack.last_mut()
            {
                *key = k;
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                key = stack.last().is_some_and(Frame::wants_key).then(Vec::new);
            }
            // A key comes after `,` in an object, a value after `:`.
            b':' | b',' => {
                if let Some(Frame::Object { wants_key, .. }) = stack.last_mut() {
                    *wants_key = b == b',';
                }
            }
            b'{' | b'[' => {
                if watched.is_none() && in_tool_entry(&stack) {
                    watched = Some((i, 0));
                }
                stack.push(match b {
                    b'{' => Frame::Object {
                        key: Vec::new(),
                        wants_key: true,
                    },
                    _ => Frame::Array,
                });
                if let Some((_, deepest)) = watched.as_mut() {
                    *deepest = (*deepest).max(stack.len());
                }
            }
            b'}' | b']' => {
                stack.pop()?;
                if let Some((start, deepest)) = watched
                    && in_tool_entry(&stack)
                {
                    if deepest > MAX_DEPTH {
                        cuts.push((start, i + 1));
                    }
                    watched = None;
                }
            }
            _ => {}
        }
    }
    if cuts.is_empty() {
        return None;
    }
    let out = replaced(message, &cuts);
    (depth(&out) <= MAX_DEPTH).then_some(out)
}

/// `message` with each of the byte ranges `cuts` (in order) replaced by [`TOO_DEEP`].
fn replaced(message: &[u8], cuts: &[(usize, usize)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    for &(start, end) in cuts {
        out.extend_from_slice(&message[at..start]);
        out.extend_from_slice(TOO_DEEP.as_bytes());
        at = end;
    }
    out.extend_from_slice(&message[at..]);
    out
}

/// Whether the innermost container is an entry of `result.tools` (a member's value opens next).
fn in_tool_entry(stack: &[Frame]) -> bool {
    matches!(
        stack,
        [
            Frame::Object { key: r, .. },
            Frame::Object { key: t, .. },
            Frame::Array,
            Frame::Object { wants_key: false, .. },
        ] if r == b"result" && t == b"tools"
    )
}

/// The deepest nesting of `message`, strings not counted.
fn depth(message: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in message {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn schema(levels: usize) -> String {
        format!(
            r#"{{"type":"object","properties":{{"x":{}1{}}}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    }

    #[test]
    fn a_tool_nested_too_deep_is_marked_and_the_others_kept() {
        let message = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"name":"deep","inputSchema":{}}},{{"name":"probe","description":"a \"[[[\" string","inputSchema":{}}}]}}}}"#,
            schema(1000),
            schema(3)
        );
        assert!(
            serde_json::from_str::<Value>(&message).is_err(),
            "too deep as sent"
        );
        let pruned = prune_tools(message.as_bytes()).expect("pruned");
        let v: Value = serde_json::from_slice(&pruned).expect("reads now");
        let tools = v["result"]["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0]["name"], "deep");
        assert_eq!(tools[0]["inputSchema"][TOO_DEEP_KEY], true);
        assert_eq!(tools[1]["name"], "probe");
        assert_eq!(tools[1]["description"], "a \"[[[\" string");
        assert_eq!(
            tools[1]["inputSchema"],
            serde_json::from_str::<Value>(&schema(3)).expect("schema")
        );
    }

    #[test]
    fn other_deep_messages_are_left_to_be_refused() {
        // Deep outside a tool entry (a call's result), or no tool list at all.
        let result = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"content":{}1{}}}}}"#,
            "[".repeat(500),
            "]".repeat(500)
        );
        assert_eq!(prune_tools(result.as_bytes()), None);
        let ok = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
        assert_eq!(prune_tools(ok.as_bytes()), None);
        // A tool entry itself too deep to hold even its members: left to be refused.
        assert_eq!(prune_tools(b"[[[["), None);
    }
}
