//! ChatGPT's `conversations.json` as gemma-chat chats ([`chatgpt`]): each conversation's whole
//! tree of messages (an edited message and a regenerated answer become versions ‹n/m›, numbered
//! in the order they were written), shown on the branch it was left on (`current_node`, else its
//! last leaf); tool, hidden and empty messages are left out, their children kept, and a note
//! says how many and what else was not as the file says.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{SavedBranch, SavedChat, SavedMessage, VERSION};

/// One ChatGPT conversation, and notes on what of it was left out or changed.
pub(super) fn chatgpt(c: &Value) -> Result<(SavedChat, Vec<String>), String> {
    let mapping = c
        .get("mapping")
        .and_then(Value::as_object)
        .ok_or("a ChatGPT conversation without its mapping")?;
    let mut notes = Vec::new();
    let current = c.get("current_node").and_then(Value::as_str);
    let current = match current {
        Some(k) if !mapping.contains_key(k) => {
            notes.push(format!(
                "its current message ({:?}) is not among its messages: shown on its last branch",
                crate::chats::fmt::short(k)
            ));
            None
        }
        other => other,
    };
    let on_path = path(mapping, current)?;
    let (roots, children) = tree_of(mapping);
    // Every message of the tree, parents first and siblings in the order they were written,
    // each with its nearest kept ancestor (0: none).
    let mut nodes: Vec<(&str, u64, SavedMessage)> = Vec::new();
    let mut stack: Vec<(&str, u64)> = roots.iter().rev().map(|k| (*k, 0)).collect();
    let mut seen = HashSet::new();
    let mut left_out = 0;
    while let Some((key, parent)) = stack.pop() {
        if !seen.insert(key) {
            continue;
        }
        let first = nodes.is_empty() && on_path.contains(key);
        let mut carried = parent;
        let kept = message(&mapping[key], first);
        if kept.is_none() && mapping[key].get("message").is_some_and(|m| !m.is_null()) {
            left_out += 1;
        }
        if let Some(mut m) = kept {
            m.id = nodes.len() as u64 + 1;
            m.parent = (parent != 0 && m.role != "system").then_some(parent);
            if m.role != "system" {
                carried = m.id;
            }
            nodes.push((key, m.id, m));
        }
        if let Some(kids) = children.get(key) {
            stack.extend(kids.iter().rev().map(|k| (*k, carried)));
        }
    }
    if left_out > 0 {
        notes.push(format!(
            "{left_out} tool, hidden, system or empty message{} left out",
            if left_out == 1 { "" } else { "s" }
        ));
    }
    let (messages, rest): (Vec<_>, Vec<_>) =
        nodes.into_iter().partition(|(k, _, _)| on_path.contains(k));
    let messages = messages.into_iter().map(|(_, _, m)| m).collect();
    let chat = SavedChat {
        version: VERSION,
        title: c
            .get("title")
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .unwrap_or("imported chat")
            .to_string(),
        model: "ChatGPT".into(),
        messages,
        branches: chains(rest.into_iter().map(|(_, _, m)| m).collect()),
        ..SavedChat::default()
    };
    Ok((chat, notes))
}

/// The tree's roots and each message's children, each list in the order its messages were
/// written (ties by key).
fn tree_of(mapping: &Map<String, Value>) -> (Vec<&str>, HashMap<&str, Vec<&str>>) {
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut roots = Vec::new();
    for (key, n) in mapping {
        match n.get("parent").and_then(Value::as_str) {
            Some(p) if mapping.contains_key(p) => children.entry(p).or_default().push(key),
            _ => roots.push(key.as_str()),
        }
    }
    let written = |k: &&str| {
        mapping[*k]
            .pointer("/message/create_time")
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    };
    let by_time = |v: &mut Vec<&str>| {
        v.sort_by(|a, b| written(a).total_cmp(&written(b)).then(a.cmp(b)));
    };
    by_time(&mut roots);
    for v in children.values_mut() {
        by_time(v);
    }
    (roots, children)
}

/// The keys from the root to `current` (or, without one, to the last leaf in the file).
fn path<'a>(
    mapping: &'a Map<String, Value>,
    current: Option<&str>,
) -> Result<HashSet<&'a str>, String> {
    let leaf = current.map(str::to_string).or_else(|| {
        mapping
            .iter()
            .filter(|(_, n)| {
                n.get("children")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
            })
            .map(|(k, _)| k.clone())
            .next_back()
    });
    let mut on_path = HashSet::new();
    let mut node = leaf;
    while let Some(key) = node.take() {
        let Some((k, n)) = mapping.get_key_value(&key) else {
            break;
        };
        if !on_path.insert(k.as_str()) {
            return Err("a ChatGPT conversation whose parent links loop".into());
        }
        node = n.get("parent").and_then(Value::as_str).map(str::to_string);
    }
    Ok(on_path)
}

/// A node's message as gemma-chat keeps it: the user's and the assistant's text (a system
/// message only `first`), else `None`.
fn message(n: &Value, first: bool) -> Option<SavedMessage> {
    let m = n.get("message").filter(|m| !m.is_null())?;
    let role = match m.pointer("/author/role").and_then(Value::as_str)? {
        "user" => "user",
        "assistant" => "model",
        "system" if first => "system",
        _ => return None,
    };
    let text = m
        .pointer("/content/parts")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("\n");
    (!text.trim().is_empty()).then(|| SavedMessage::new(role, &text))
}

/// Messages off the shown path (parents first) as branches: each a chain that follows the first
/// child of each message, hanging from its first message's parent.
fn chains(rest: Vec<SavedMessage>) -> Vec<SavedBranch> {
    let mut kids: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, m) in rest.iter().enumerate() {
        kids.entry(m.parent.unwrap_or(0)).or_default().push(i);
    }
    let mut placed = vec![false; rest.len()];
    let mut branches = Vec::new();
    for start in 0..rest.len() {
        if placed[start] {
            continue;
        }
        let mut chain = Vec::new();
        let mut at = Some(start);
        while let Some(i) = at {
            placed[i] = true;
            chain.push(rest[i].clone());
            at = kids
                .get(&rest[i].id)
                .and_then(|k| k.iter().copied().find(|&j| !placed[j]));
        }
        branches.push(SavedBranch {
            parent: rest[start].parent.unwrap_or(0),
            messages: chain,
        });
    }
    branches
}
