//! Reads JSON schemas into the nodes of the call graph (`grammar.rs` owns the graph and its
//! analysis). Errors are plain reasons; the caller names the tool.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::format::{QUOTE, format_number, sorted_entries};
use super::grammar::{Node, NodeId, ObjNode, key_hash};
use super::matcher::Sym;

/// How deep a schema may nest (literal nesting and `$ref` chains alike).
const MAX_DEPTH: usize = 64;
/// Levels of nesting a schema without a type (any value) allows.
pub(crate) const ANY_DEPTH: usize = 4;

type Reason = String;

/// Builds nodes from schemas, one tool after another.
pub(crate) struct Compiler {
    nodes: Vec<Node>,
    /// `$ref` → its node, for the current tool.
    refs: HashMap<String, NodeId>,
    /// The current tool's schema, which `$ref`s point into.
    root: Value,
    /// "Any value" nodes by remaining depth, shared by all tools.
    any: [Option<NodeId>; ANY_DEPTH + 1],
    string: NodeId,
    integer: NodeId,
    number: NodeId,
    boolean: NodeId,
    null: NodeId,
}

impl Compiler {
    pub fn new() -> Self {
        let lit = |s: &str| Node::Lit(s.bytes().map(Sym::Byte).collect());
        let nodes = vec![
            Node::Str,
            Node::Num { integer: true },
            Node::Num { integer: false },
            lit("true"),
            lit("false"),
            Node::Union(vec![3, 4]),
            lit("null"),
            // What the template itself writes for a null (jinja2 prints Python's `None`).
            lit("None"),
            Node::Union(vec![6, 7]),
        ];
        Self {
            nodes,
            refs: HashMap::new(),
            root: Value::Null,
            any: [None; ANY_DEPTH + 1],
            string: 0,
            integer: 1,
            number: 2,
            boolean: 5,
            null: 8,
        }
    }

    pub fn into_nodes(self) -> Vec<Node> {
        self.nodes
    }

    /// A tool's parameters: `null` is an object without keys; an object schema without a
    /// type is read as an object.
    pub fn parameters(&mut self, schema: &Value) -> Result<NodeId, Reason> {
        self.refs.clear();
        self.root = schema.clone();
        match schema {
            Value::Null => Ok(self.push(Node::Obj(ObjNode {
                keys: Vec::new(),
                hashes: Vec::new(),
                values: Vec::new(),
                required: Vec::new(),
                free: None,
            }))),
            Value::Object(o)
                if ["type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"]
                    .iter()
                    .all(|k| !o.contains_key(*k)) =>
            {
                self.object(o, 0)
            }
            _ => self.compile(schema, 0),
        }
    }

    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        (self.nodes.len() - 1) as NodeId
    }

    fn compile(&mut self, s: &Value, depth: usize) -> Result<NodeId, Reason> {
        if depth > MAX_DEPTH {
            return Err(format!("the schema nests deeper than {MAX_DEPTH} levels"));
        }
        match s {
            Value::Bool(true) => Ok(self.any(ANY_DEPTH)),
            Value::Bool(false) => Ok(self.push(Node::Union(Vec::new()))),
            Value::Object(o) => self.schema(o, depth),
            _ => Err(format!(
                "a schema must be an object or a boolean, not `{s}`"
            )),
        }
    }

    fn schema(&mut self, o: &Map<String, Value>, depth: usize) -> Result<NodeId, Reason> {
        let base = if let Some(r) = o.get("$ref") {
            let r = r.as_str().ok_or("`$ref` must be a string")?;
            self.reference(r, depth)?
        } else if let Some(c) = o.get("const") {
            let l = literal(c)?;
            self.push(Node::Lit(l))
        } else if let Some(e) = o.get("enum") {
            let values = e.as_array().ok_or("`enum` must be an array")?;
            if values.is_empty() {
                return Err("`enum` is empty".into());
            }
            let mut alts = Vec::with_capacity(values.len());
            for v in values {
                let l = literal(v)?;
                alts.push(self.push(Node::Lit(l)));
            }
            self.push(Node::Union(alts))
        } else if let Some(list) = o.get("anyOf").or_else(|| o.get("oneOf")) {
            let list = list.as_array().ok_or("`anyOf`/`oneOf` must be an array")?;
            let mut alts = Vec::with_capacity(list.len());
            for s in list {
                alts.push(self.compile(s, depth + 1)?);
            }
            self.push(Node::Union(alts))
        } else if let Some(all) = o.get("allOf") {
            let merged = self.merge(o, all)?;
            self.schema(&merged, depth + 1)?
        } else {
            self.typed(o, depth)?
        };
        if o.get("nullable") == Some(&Value::Bool(true)) {
            let null = self.null;
            return Ok(self.push(Node::Union(vec![base, null])));
        }
        Ok(base)
    }

    fn typed(&mut self, o: &Map<String, Value>, depth: usize) -> Result<NodeId, Reason> {
        match o.get("type") {
            None if ["properties", "required", "additionalProperties"]
                .iter()
                .any(|k| o.contains_key(*k)) =>
            {
                self.object(o, depth)
            }
            None if o.contains_key("items") => self.array(o, depth),
            None => Ok(self.any(ANY_DEPTH)),
            Some(Value::String(t)) => self.one_type(t, o, depth),
            Some(Value::Array(types)) if !types.is_empty() => {
                let mut alts = Vec::with_capacity(types.len());
                for t in types {
                    let t = t.as_str().ok_or("a `type` list holds strings")?;
                    alts.push(self.one_type(t, o, depth)?);
                }
                Ok(self.push(Node::Union(alts)))
            }
            Some(t) => Err(format!(
                "`type` must be a name or a list of names, not `{t}`"
            )),
        }
    }

    fn one_type(
        &mut self,
        t: &str,
        o: &Map<String, Value>,
        depth: usize,
    ) -> Result<NodeId, Reason> {
        match t.to_ascii_lowercase().as_str() {
            "string" => Ok(self.string),
            "integer" => Ok(self.integer),
            "number" => Ok(self.number),
            "boolean" => Ok(self.boolean),
            "null" => Ok(self.null),
            "object" => self.object(o, depth),
            "array" => self.array(o, depth),
            _ => Err(format!("unknown type `{t}`")),
        }
    }

    fn object(&mut self, o: &Map<String, Value>, depth: usize) -> Result<NodeId, Reason> {
        let props = match o.get("properties") {
            None | Some(Value::Null) => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => return Err("`properties` must be an object".into()),
        };
        let free = match o.get("additionalProperties") {
            None if props.is_none() => Some(self.any(ANY_DEPTH)),
            None | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(self.any(ANY_DEPTH)),
            Some(s @ Value::Object(_)) => Some(self.compile(s, depth + 1)?),
            Some(_) => return Err("`additionalProperties` must be a boolean or a schema".into()),
        };
        let required: Vec<&str> = match o.get("required") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(r)) => r
                .iter()
                .map(|k| k.as_str().ok_or("`required` holds property names"))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`required` must be an array of names".into()),
        };
        let mut entries: Vec<(Box<[u8]>, NodeId)> = Vec::new();
        for (k, v) in props.into_iter().flatten() {
            if !writable(k) {
                if required.contains(&k.as_str()) {
                    return Err(format!(
                        "the required property `{k}` cannot be written unquoted"
                    ));
                }
                continue;
            }
            let node = self.compile(v, depth + 1)?;
            entries.push((k.as_bytes().into(), node));
        }
        for &r in &required {
            if !writable(r) {
                return Err(format!(
                    "the required property `{r}` cannot be written unquoted"
                ));
            }
            if !entries.iter().any(|(k, _)| **k == *r.as_bytes()) {
                let node = match free {
                    Some(f) => f,
                    None => self.any(ANY_DEPTH),
                };
                entries.push((r.as_bytes().into(), node));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut req: Vec<u32> = required
            .iter()
            .filter_map(|r| entries.binary_search_by(|e| (*e.0).cmp(r.as_bytes())).ok())
            .map(|i| i as u32)
            .collect();
        req.sort_unstable();
        req.dedup();
        let obj = ObjNode {
            hashes: entries.iter().map(|(k, _)| key_hash(k)).collect(),
            values: entries.iter().map(|e| e.1).collect(),
            keys: entries.into_iter().map(|e| e.0).collect(),
            required: req,
            free,
        };
        Ok(self.push(Node::Obj(obj)))
    }

    fn array(&mut self, o: &Map<String, Value>, depth: usize) -> Result<NodeId, Reason> {
        let items = match o.get("items").or_else(|| o.get("prefixItems")) {
            None | Some(Value::Bool(true)) => self.any(ANY_DEPTH),
            Some(Value::Array(tuple)) => {
                let mut alts = Vec::with_capacity(tuple.len());
                for s in tuple {
                    alts.push(self.compile(s, depth + 1)?);
                }
                self.push(Node::Union(alts))
            }
            Some(s) => self.compile(s, depth + 1)?,
        };
        let count = |key: &str, default: u32| match o.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .map(|n| n.min(u32::MAX as u64) as u32)
                .ok_or(format!("`{key}` must be a non-negative integer")),
        };
        let (min, max) = (count("minItems", 0)?, count("maxItems", u32::MAX)?);
        if min > max {
            return Err(format!("`minItems` {min} is above `maxItems` {max}"));
        }
        Ok(self.push(Node::Arr { items, min, max }))
    }

    /// A local `$ref`; recursion through it makes a cycle in the graph.
    fn reference(&mut self, r: &str, depth: usize) -> Result<NodeId, Reason> {
        if let Some(&id) = self.refs.get(r) {
            return Ok(id);
        }
        let target = self.resolve(r)?.clone();
        let id = self.push(Node::Union(Vec::new()));
        self.refs.insert(r.to_string(), id);
        let t = self.compile(&target, depth + 1)?;
        self.nodes[id as usize] = Node::Union(vec![t]);
        Ok(id)
    }

    fn resolve(&self, r: &str) -> Result<&Value, Reason> {
        let found = match r {
            "#" => Some(&self.root),
            _ => r.strip_prefix('#').and_then(|p| self.root.pointer(p)),
        };
        found.ok_or(format!(
            "`$ref` `{r}` does not point into the schema (only `#/$defs/…`-style refs are read)"
        ))
    }

    /// `allOf` folded into one schema: properties and required names pooled, other keywords
    /// taken from the first schema that has them.
    fn merge(&self, o: &Map<String, Value>, all: &Value) -> Result<Map<String, Value>, Reason> {
        let list = all.as_array().ok_or("`allOf` must be an array")?;
        let mut out = o.clone();
        out.remove("allOf");
        for s in list {
            let mut s = s;
            for _ in 0..MAX_DEPTH {
                match s.get("$ref").and_then(Value::as_str) {
                    Some(r) => s = self.resolve(r)?,
                    None => break,
                }
            }
            let Value::Object(s) = s else {
                return Err("`allOf` holds schemas".into());
            };
            for (k, v) in s {
                match (k.as_str(), out.get_mut(k), v) {
                    ("properties", Some(Value::Object(p)), Value::Object(more)) => {
                        p.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                    ("required", Some(Value::Array(r)), Value::Array(more)) => {
                        r.extend(more.iter().cloned());
                    }
                    ("$ref", _, _) => {}
                    (_, None, _) => {
                        out.insert(k.clone(), v.clone());
                    }
                    _ => {}
                }
            }
        }
        Ok(out)
    }

    /// Any value, nesting at most `depth` more levels.
    fn any(&mut self, depth: usize) -> NodeId {
        if let Some(id) = self.any[depth] {
            return id;
        }
        let mut alts = vec![self.string, self.number, self.boolean, self.null];
        if depth > 0 {
            let inner = self.any(depth - 1);
            alts.push(self.push(Node::Obj(ObjNode {
                keys: Vec::new(),
                hashes: Vec::new(),
                values: Vec::new(),
                required: Vec::new(),
                free: Some(inner),
            })));
            alts.push(self.push(Node::Arr {
                items: inner,
                min: 0,
                max: u32::MAX,
            }));
        }
        let id = self.push(Node::Union(alts));
        self.any[depth] = Some(id);
        id
    }
}

/// Whether a key can be written unquoted and read back (`parse.rs` reads a bare key up to `:`).
fn writable(k: &str) -> bool {
    !k.is_empty()
        && !k.contains(QUOTE)
        && !k.contains([':', ',', '{', '}', '[', ']'])
        && k.trim() == k
}

/// The symbols of an `enum`/`const` value as a call writes it (`null` as `null`).
fn literal(v: &Value) -> Result<Box<[Sym]>, Reason> {
    let mut out = Vec::new();
    write_literal(v, &mut out)?;
    Ok(out.into())
}

fn write_literal(v: &Value, out: &mut Vec<Sym>) -> Result<(), Reason> {
    let bytes = |s: &str, out: &mut Vec<Sym>| out.extend(s.bytes().map(Sym::Byte));
    match v {
        Value::String(s) if s.contains(QUOTE) => {
            return Err(format!(
                "the value `{s}` holds `<|\"|>`, which a string cannot"
            ));
        }
        Value::String(s) => {
            out.push(Sym::Quote);
            bytes(s, out);
            out.push(Sym::Quote);
        }
        Value::Number(n) => bytes(&format_number(n), out),
        Value::Bool(b) => bytes(if *b { "true" } else { "false" }, out),
        Value::Null => bytes("null", out),
        Value::Array(items) => {
            bytes("[", out);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    bytes(",", out);
                }
                write_literal(item, out)?;
            }
            bytes("]", out);
        }
        Value::Object(m) => {
            bytes("{", out);
            for (i, (k, v)) in sorted_entries(m).into_iter().enumerate() {
                if i > 0 {
                    bytes(",", out);
                }
                bytes(k, out);
                bytes(":", out);
                write_literal(v, out)?;
            }
            bytes("}", out);
        }
    }
    Ok(())
}
