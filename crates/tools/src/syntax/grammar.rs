//! The language of one tool call, compiled from the declared tools' JSON schemas: `call:` + a
//! declared name + `{` + that tool's parameters object + `}` + `<tool_call|>`, in the syntax
//! the template writes (unquoted keys, `<|"|>` strings, no whitespace). This file owns the
//! compiled graph and its analysis (shortest values, dead branches pruned); `schema.rs` reads
//! the schemas, `matcher.rs` walks the graph, `complete.rs` finishes a walk.

use std::sync::Arc;

use serde_json::Value;

use super::matcher::{Matcher, Sym};
use super::schema::Compiler;

/// The index of a node in the compiled graph.
pub(crate) type NodeId = u32;

/// Longer than any value the graph can force; "no value at all".
pub(crate) const INF: u64 = u64::MAX / 8;

/// Why the declared tools could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// An empty tool list admits no call.
    #[error("no tools are declared, so no tool call can be constrained")]
    NoTools,
    /// Two tools share a name.
    #[error("the tool `{0}` is declared twice")]
    Duplicate(String),
    /// The name cannot be written after `call:`.
    #[error(
        "the tool name `{0}` cannot be written in a call (empty, or with `{{`, whitespace or `<|\"|>`)"
    )]
    BadName(String),
    /// The tool's parameter schema is malformed, unsupported, or admits no object.
    #[error("the parameters of tool `{tool}`: {reason}")]
    Schema {
        /// The tool's name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}

/// One node of the compiled graph: a value of some shape.
pub(crate) enum Node {
    /// `<|"|>` UTF-8 text without `<|"|>` `<|"|>`.
    Str,
    /// A JSON number; `integer` allows no fraction or exponent.
    Num { integer: bool },
    /// Exactly these symbols (`true`, `null`, an `enum` or `const` value).
    Lit(Box<[Sym]>),
    /// An object with unquoted keys.
    Obj(ObjNode),
    /// An array of `min..=max` items.
    Arr { items: NodeId, min: u32, max: u32 },
    /// Any of these (`anyOf`, a type list, `nullable`, a `$ref` placeholder).
    Union(Vec<NodeId>),
}

/// The keys an object takes.
pub(crate) struct ObjNode {
    /// Declared keys, sorted by their bytes.
    pub keys: Vec<Box<[u8]>>,
    /// [`key_hash`] of each key.
    pub hashes: Vec<u64>,
    /// Each key's value.
    pub values: Vec<NodeId>,
    /// Indices of the required keys.
    pub required: Vec<u32>,
    /// The value of any other identifier key, when other keys are allowed.
    pub free: Option<NodeId>,
}

/// The compiled, analysed graph a [`Matcher`] walks.
pub(crate) struct Graph {
    pub nodes: Vec<Node>,
    /// For each node, the concrete (non-union) nodes it may be, each with some finite value.
    pub alts: Vec<Box<[NodeId]>>,
    /// For each node, the length in symbols of its shortest value ([`INF`]: none).
    pub min: Vec<u64>,
    /// Tool names, sorted by their bytes.
    pub names: Vec<Box<[u8]>>,
    /// Each tool's parameters (a union of object nodes), in the order of `names`.
    pub params: Vec<NodeId>,
}

/// FNV-1a of a key, built a byte at a time by the matcher.
pub(crate) const KEY_HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Extends a [`key_hash`] by one byte.
pub(crate) fn key_hash_step(h: u64, b: u8) -> u64 {
    (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
}

/// FNV-1a of a whole key: keys already written in an object are remembered by this hash.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(KEY_HASH_START, |h, &b| key_hash_step(h, b))
}

/// The constraint that makes every sampled tool call well-formed: compiled once from the
/// declared tools, then walked by a [`Matcher`] per call.
#[derive(Clone)]
pub struct CallGrammar {
    g: Arc<Graph>,
}

impl std::fmt::Debug for CallGrammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self
            .g
            .names
            .iter()
            .map(|n| String::from_utf8_lossy(n))
            .collect();
        f.debug_struct("CallGrammar")
            .field("tools", &names)
            .field("nodes", &self.g.nodes.len())
            .finish()
    }
}

impl CallGrammar {
    /// Compiles the tools, each a name and the JSON schema of its parameters (`null` for a
    /// tool without parameters). Supported: `type` (a name or a list), `properties`,
    /// `required`, `additionalProperties`, `enum`, `const`, `nullable`, `items`/`prefixItems`,
    /// `minItems`/`maxItems`, `anyOf`/`oneOf`, `allOf` (merged), local `$ref`s (recursion
    /// allowed, as long as some finite value exists). Other keywords are ignored.
    ///
    /// An object schema without `properties` takes any identifier keys with any values;
    /// `properties: {}` takes none unless `additionalProperties` says so. An optional property
    /// whose name cannot be written unquoted (`:`, `,`, brackets, `<|"|>`) is left out.
    pub fn new(tools: &[(String, Value)]) -> Result<Self, GrammarError> {
        if tools.is_empty() {
            return Err(GrammarError::NoTools);
        }
        let mut c = Compiler::new();
        let mut entries = Vec::with_capacity(tools.len());
        for (name, schema) in tools {
            let bad = name.is_empty()
                || name.contains(['{', '}'])
                || name.contains(super::format::QUOTE)
                || name.chars().any(|ch| ch.is_whitespace() || ch.is_control());
            if bad {
                return Err(GrammarError::BadName(name.clone()));
            }
            let root = c
                .parameters(schema)
                .map_err(|reason| GrammarError::Schema {
                    tool: name.clone(),
                    reason,
                })?;
            entries.push((name.clone(), root));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(GrammarError::Duplicate(w[0].0.clone()));
        }
        let g = Graph::finish(c.into_nodes(), entries)?;
        Ok(Self { g: Arc::new(g) })
    }

    /// A matcher at the start of a call, right after `<|tool_call>`.
    pub fn matcher(&self) -> Matcher {
        Matcher::new(self.g.clone())
    }

    /// The declared tool names, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        self.g
            .names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    }
}

impl Graph {
    /// Analyses the compiled nodes: shortest values, alternatives, dead branches pruned.
    fn finish(mut nodes: Vec<Node>, tools: Vec<(String, NodeId)>) -> Result<Self, GrammarError> {
        let mut params = Vec::with_capacity(tools.len());
        for (_, root) in &tools {
            params.push(nodes.len() as NodeId);
            nodes.push(Node::Union(vec![*root]));
        }
        let min = shortest(&nodes);
        let mut alts: Vec<Box<[NodeId]>> = (0..nodes.len())
            .map(|i| concrete(&nodes, &min, i as NodeId))
            .collect();
        prune(&mut nodes, &min);
        let mut min = min;
        for ((name, _), &p) in tools.iter().zip(&params) {
            let objs: Box<[NodeId]> = alts[p as usize]
                .iter()
                .copied()
                .filter(|&a| matches!(nodes[a as usize], Node::Obj(_)))
                .collect();
            if objs.is_empty() {
                let reason = if alts[p as usize].is_empty() {
                    "no value satisfies them (a required property that contains itself?)"
                } else {
                    "they are not an object schema"
                };
                return Err(GrammarError::Schema {
                    tool: name.clone(),
                    reason: reason.into(),
                });
            }
            min[p as usize] = objs.iter().map(|&a| min[a as usize]).min().unwrap_or(INF);
            alts[p as usize] = objs;
        }
        Ok(Self {
            nodes,
            alts,
            min,
            names: tools.iter().map(|(n, _)| n.as_bytes().into()).collect(),
            params,
        })
    }

    /// The object node behind `id`.
    pub fn obj(&self, id: NodeId) -> &ObjNode {
        match &self.nodes[id as usize] {
            Node::Obj(o) => o,
            _ => unreachable!("node {id} is not an object"),
        }
    }

    /// Appends the shortest value of `node` (one of its cheapest alternatives).
    pub fn min_value(&self, node: NodeId, out: &mut Vec<Sym>) {
        let alts = &self.alts[node as usize];
        let Some(&alt) = alts.iter().min_by_key(|&&a| self.min[a as usize]) else {
            return;
        };
        match &self.nodes[alt as usize] {
            Node::Str => out.extend([Sym::Quote, Sym::Quote]),
            Node::Num { .. } => out.push(Sym::Byte(b'0')),
            Node::Lit(l) => out.extend_from_slice(l),
            Node::Obj(o) => {
                out.push(Sym::Byte(b'{'));
                for (i, &r) in o.required.iter().enumerate() {
                    if i > 0 {
                        out.push(Sym::Byte(b','));
                    }
                    out.extend(o.keys[r as usize].iter().map(|&b| Sym::Byte(b)));
                    out.push(Sym::Byte(b':'));
                    self.min_value(o.values[r as usize], out);
                }
                out.push(Sym::Byte(b'}'));
            }
            Node::Arr { items, min, .. } => {
                out.push(Sym::Byte(b'['));
                for i in 0..*min {
                    if i > 0 {
                        out.push(Sym::Byte(b','));
                    }
                    self.min_value(*items, out);
                }
                out.push(Sym::Byte(b']'));
            }
            Node::Union(_) => {}
        }
    }
}

/// The shortest value of every node, by relaxation until nothing shrinks (the graph may be
/// cyclic through `$ref`s; a node on a cycle that never bottoms out stays at [`INF`]).
fn shortest(nodes: &[Node]) -> Vec<u64> {
    let mut min = vec![INF; nodes.len()];
    loop {
        let mut changed = false;
        for (i, node) in nodes.iter().enumerate() {
            let m = match node {
                Node::Str => 2,
                Node::Num { .. } => 1,
                Node::Lit(l) => l.len() as u64,
                Node::Obj(o) => {
                    let fields = o.required.iter().map(|&r| {
                        let r = r as usize;
                        (o.keys[r].len() as u64 + 1).saturating_add(min[o.values[r] as usize])
                    });
                    let commas = o.required.len().saturating_sub(1) as u64;
                    fields.fold(2 + commas, u64::saturating_add)
                }
                Node::Arr { min: 0, .. } => 2,
                Node::Arr { items, min: n, .. } => (*n as u64)
                    .saturating_mul(min[*items as usize])
                    .saturating_add(1 + *n as u64),
                Node::Union(c) => c.iter().map(|&c| min[c as usize]).min().unwrap_or(INF),
            }
            .min(INF);
            if m < min[i] {
                min[i] = m;
                changed = true;
            }
        }
        if !changed {
            return min;
        }
    }
}

/// The concrete nodes `id` may be, through any unions, each with a finite shortest value.
fn concrete(nodes: &[Node], min: &[u64], id: NodeId) -> Box<[NodeId]> {
    let mut out = Vec::new();
    let mut seen = vec![false; nodes.len()];
    let mut stack = vec![id];
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut seen[n as usize], true) {
            continue;
        }
        match &nodes[n as usize] {
            Node::Union(c) => stack.extend(c.iter().rev()),
            _ if min[n as usize] < INF => out.push(n),
            _ => {}
        }
    }
    out.into()
}

/// Drops what can never be finished, so that every prefix a matcher accepts can be: optional
/// keys without a value, free keys without a value, array items without a value.
fn prune(nodes: &mut [Node], min: &[u64]) {
    let ok = |n: NodeId| min[n as usize] < INF;
    for node in nodes.iter_mut() {
        match node {
            Node::Obj(o) => {
                if o.free.is_some_and(|f| !ok(f)) {
                    o.free = None;
                }
                if o.values.iter().all(|&v| ok(v)) {
                    continue;
                }
                let mut new_index = vec![u32::MAX; o.values.len()];
                let (mut keys, mut hashes, mut values) = (Vec::new(), Vec::new(), Vec::new());
                for (i, slot) in new_index.iter_mut().enumerate() {
                    if ok(o.values[i]) {
                        *slot = values.len() as u32;
                        keys.push(std::mem::take(&mut o.keys[i]));
                        hashes.push(o.hashes[i]);
                        values.push(o.values[i]);
                    }
                }
                (o.keys, o.hashes, o.values) = (keys, hashes, values);
                o.required = o
                    .required
                    .iter()
                    .map(|&r| new_index[r as usize])
                    .filter(|&r| r != u32::MAX)
                    .collect();
            }
            Node::Arr { items, max, .. } if !ok(*items) => *max = 0,
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "grammar_tests.rs"]
mod tests;
