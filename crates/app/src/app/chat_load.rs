//! A saved chat's tree read back as a tab's path and branches ([`tree`]): whatever the file
//! holds, nothing is dropped. Ids missing (format 2), repeated or near 2^64 are numbered afresh;
//! a path whose messages do not follow their parents (a hand-edited or merged file) is split
//! where it stops following them, the rest hanging as branches from the parents they name; a
//! branch that hangs from no message hangs from the start.

use std::collections::HashSet;

use super::chat_tree::message;
use super::tab::{Branch, Message};
use crate::chats::format::MAX_ID;
use crate::chats::{SavedBranch, SavedMessage};

/// The path and branches of a saved chat. Nothing is dropped: messages without ids (version 2),
/// repeated ids or ids beyond [`MAX_ID`] are numbered afresh in order (a branch keeps hanging
/// from the first message that had its parent's id), and a branch that hangs from no message
/// of the tree (or from itself) hangs from the start.
pub fn tree(path: Vec<SavedMessage>, branches: Vec<SavedBranch>) -> (Vec<Message>, Vec<Branch>) {
    let (path, branches) = split_path(path, branches);
    let mut seen = HashSet::new();
    let sound = path
        .iter()
        .chain(branches.iter().flat_map(|b| &b.messages))
        .all(|m| (1..=MAX_ID).contains(&m.id) && seen.insert(m.id));
    let mut messages: Vec<Message> = path.into_iter().map(message).collect();
    let mut branches: Vec<Branch> = branches
        .into_iter()
        .filter(|b| !b.messages.is_empty())
        .map(|b| Branch {
            parent: b.parent,
            messages: b.messages.into_iter().map(message).collect(),
        })
        .collect();
    if !sound {
        renumber(&mut messages, &mut branches);
    }
    // Reachable from the start: the path, then each branch whose parent is reachable.
    let mut reached: HashSet<u64> = messages.iter().map(|m| m.id).collect();
    reached.insert(0);
    let mut hung = vec![false; branches.len()];
    loop {
        let mut grew = false;
        for (b, done) in branches.iter().zip(hung.iter_mut()) {
            if !*done && reached.contains(&b.parent) {
                *done = true;
                grew = true;
                reached.extend(b.messages.iter().map(|m| m.id));
            }
        }
        if !grew {
            break;
        }
    }
    for (b, done) in branches.iter_mut().zip(hung) {
        if !done {
            b.parent = 0;
        }
    }
    (messages, branches)
}

/// Numbers every message afresh (the path first); each branch's parent follows the first
/// message that had its id.
fn renumber(messages: &mut [Message], branches: &mut [Branch]) {
    let mut new_id = std::collections::HashMap::new();
    let mut next = 0;
    let all = messages
        .iter_mut()
        .chain(branches.iter_mut().flat_map(|b| b.messages.iter_mut()));
    for m in all {
        next += 1;
        new_id.entry(m.id).or_insert(next);
        m.id = next;
    }
    for b in branches {
        b.parent = match b.parent {
            0 => 0,
            p => new_id.get(&p).copied().unwrap_or(0),
        };
    }
}

/// The path up to the first message whose parent is not the one before it; from there on, each
/// run of messages that follow one another becomes a branch hanging from the parent its first
/// names (a file without parents, format 2, is one path).
fn split_path(
    path: Vec<SavedMessage>,
    mut branches: Vec<SavedBranch>,
) -> (Vec<SavedMessage>, Vec<SavedBranch>) {
    let mut kept = Vec::with_capacity(path.len());
    let mut runs: Vec<SavedBranch> = Vec::new();
    let mut prev = None;
    for m in path {
        // A system prompt is outside the tree: it stays where it is.
        let system = m.role == "system";
        let follows = system || m.parent.is_none() || m.parent == prev;
        if !system {
            prev = Some(m.id);
        }
        match runs.last_mut() {
            Some(run) if follows => run.messages.push(m),
            None if follows => kept.push(m),
            _ => runs.push(SavedBranch {
                parent: m.parent.unwrap_or(0),
                messages: vec![m],
            }),
        }
    }
    branches.splice(0..0, runs);
    (kept, branches)
}
