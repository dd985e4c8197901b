//! A tab as its chat file holds it and back: the path shown, every branch of the conversation
//! tree (ids and parents), each message's role as the file names it, its pictures, text files
//! and tool calls, and the tab's tools.

use std::collections::HashSet;

use super::attachments::{Chip, Sound};
use super::tab::Branch;
use super::tab::{Message, Role, Tab};
use super::tools::{RunState, ToolRun};
use crate::attach::TextFile;
use crate::chats::{
    SavedBranch, SavedChat, SavedFile, SavedImage, SavedMessage, SavedSampling, SavedSound,
    SavedStats, SavedTool, SavedTools, Unsent, VERSION,
};
use gemma_protocol::{Reuse, ToolChoice, ToolSelection, TurnStats};

fn role_name(r: Role) -> &'static str {
    match r {
        Role::User => "user",
        Role::Model => "model",
        Role::Notice => "notice",
        Role::Error => "error",
        Role::System => "system",
    }
}

/// The role a saved message's `role` names (anything else is a notice).
pub(super) fn role_of(s: &str) -> Role {
    match s {
        "user" => Role::User,
        "model" => Role::Model,
        "error" => Role::Error,
        "system" => Role::System,
        _ => Role::Notice,
    }
}

fn saved_message(m: &Message, parent: Option<u64>) -> SavedMessage {
    SavedMessage {
        id: m.id,
        parent,
        role: role_name(m.role).into(),
        text: m.text.clone(),
        thought: m.thought.clone(),
        footer: m.footer.clone(),
        stats: m.stats.as_ref().map(|s| SavedStats {
            reuse: s.reuse.as_str().into(),
            reused_tokens: s.reused_tokens,
            prefilled_tokens: s.prefilled_tokens,
            generated_tokens: s.generated_tokens,
            prefill_tok_s: s.prefill_tok_s,
            decode_tok_s: s.decode_tok_s,
            ttft_s: s.ttft_s,
            tool_calls: s.tool_calls,
            tool_tokens: s.tool_tokens,
            thought_tokens: s.thought_tokens,
        }),
        images: m
            .images
            .iter()
            .map(|c| SavedImage {
                path: c.path.to_string_lossy().into_owned(),
                tokens: c.tokens,
                size: c.size,
                audio: c.sound.map(|s| SavedSound {
                    ms: (s.seconds * 1000.0).round() as u64,
                    tokens: s.tokens,
                    pieces: s.pieces,
                }),
            })
            .collect(),
        files: m
            .files
            .iter()
            .map(|f| SavedFile {
                name: f.name().to_string(),
                text: f.text().to_string(),
            })
            .collect(),
        tools: m.tools.iter().map(saved_tool).collect(),
    }
}

fn saved_tool(r: &ToolRun) -> SavedTool {
    SavedTool {
        id: r.id,
        name: r.name.clone(),
        server: r.server.clone(),
        arguments: r.arguments.clone(),
        // A call saved while it runs is stopped for whoever reads the file.
        status: match r.state {
            s if s.open() => RunState::Stopped.as_str().into(),
            s => s.as_str().into(),
        },
        result: r.result.clone(),
        bytes: r.bytes,
        seconds: r.seconds,
    }
}

fn tool_run(t: SavedTool) -> ToolRun {
    ToolRun {
        id: t.id,
        name: t.name,
        server: t.server,
        arguments: t.arguments,
        state: RunState::parse(&t.status),
        result: t.result,
        bytes: t.bytes,
        seconds: t.seconds,
    }
}

/// The tab's tools as saved, when they are not the defaults.
fn saved_tools(t: &Tab) -> Option<SavedTools> {
    let (selection, only) = match &t.tools {
        ToolSelection::All => ("all", Vec::new()),
        ToolSelection::Off => ("off", Vec::new()),
        ToolSelection::Only(names) => ("only", names.clone()),
    };
    let saved = SavedTools {
        selection: selection.into(),
        only,
        choice: t.tool_choice.as_str().into(),
    };
    (t.tools != ToolSelection::All || t.tool_choice != ToolChoice::Auto).then_some(saved)
}

/// The tools and tool choice a saved tab declares (what a file does not name: the defaults).
pub fn tools_of(s: &SavedTools) -> (ToolSelection, ToolChoice) {
    let selection = match s.selection.as_str() {
        "off" => ToolSelection::Off,
        "only" => ToolSelection::Only(s.only.clone()),
        _ => ToolSelection::All,
    };
    (selection, ToolChoice::parse(&s.choice).unwrap_or_default())
}

fn message(m: SavedMessage) -> Message {
    let mut out = Message::new(role_of(&m.role), m.text);
    out.id = m.id;
    out.thought = m.thought;
    out.footer = m.footer;
    out.images = m
        .images
        .into_iter()
        .map(|i| Chip {
            path: i.path.into(),
            tokens: i.tokens,
            size: i.size,
            sound: i.audio.map(|s| Sound {
                seconds: s.ms as f32 / 1000.0,
                tokens: s.tokens,
                pieces: s.pieces,
            }),
        })
        .collect();
    out.files = m
        .files
        .into_iter()
        .map(|f| TextFile::new(f.name, f.text))
        .collect();
    out.tools = m.tools.into_iter().map(tool_run).collect();
    out.stats = m.stats.map(|s| TurnStats {
        reuse: Reuse::parse(&s.reuse).unwrap_or(Reuse::New),
        reused_tokens: s.reused_tokens,
        prefilled_tokens: s.prefilled_tokens,
        prefill_tok_s: s.prefill_tok_s,
        decode_tok_s: s.decode_tok_s,
        ttft_s: s.ttft_s,
        generated_tokens: s.generated_tokens,
        tool_calls: 0,
        tool_tokens: 0,
        thought_tokens: s.thought_tokens,
    });
    out
}

/// A chain of messages as saved: each one's parent is the one before (the first's is `parent`),
/// the system prompt outside the tree.
fn chain(messages: &[Message], mut parent: u64) -> Vec<SavedMessage> {
    messages
        .iter()
        .map(|m| {
            if m.role == Role::System {
                return saved_message(m, None);
            }
            let saved = saved_message(m, (parent != 0).then_some(parent));
            parent = m.id;
            saved
        })
        .collect()
}

/// The tab's tree and sampling as saved (title, model and order are the caller's).
pub fn saved_tree(t: &Tab) -> SavedChat {
    let sampling = SavedSampling::new(t.overrides, t.max_new_tokens, t.preset.clone());
    SavedChat {
        version: VERSION,
        messages: chain(&t.messages, 0),
        branches: t
            .branches
            .iter()
            .map(|b| SavedBranch {
                parent: b.parent,
                messages: chain(&b.messages, b.parent),
            })
            .collect(),
        sampling: (sampling != SavedSampling::default()).then_some(sampling),
        tools: saved_tools(t),
        ..SavedChat::default()
    }
}

/// A message being sent, as [`SavedChat::unsent`] holds it; `edits` is the id of the message it
/// is a new version of.
pub fn unsent(m: &Message, edits: Option<u64>) -> Unsent {
    Unsent {
        message: saved_message(m, None),
        edits,
    }
}

/// A saved unsent message back as one (its text, pictures and files).
pub fn unsent_message(u: Unsent) -> Message {
    message(u.message)
}

/// Largest message id taken as it is: ids are counted up from 1, so anything near 2^64 is a
/// crafted file (and the next id would wrap).
const MAX_ID: u64 = 1 << 48;

/// The path and branches of a saved chat. Nothing is dropped: messages without ids (version 2),
/// repeated ids or ids beyond [`MAX_ID`] are numbered afresh in order (a branch keeps hanging
/// from the first message that had its parent's id), and a branch that hangs from no message
/// of the tree (or from itself) hangs from the start.
pub fn tree(path: Vec<SavedMessage>, branches: Vec<SavedBranch>) -> (Vec<Message>, Vec<Branch>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: u64, parent: Option<u64>, role: &str, text: &str) -> SavedMessage {
        SavedMessage {
            id,
            parent,
            ..SavedMessage::new(role, text)
        }
    }

    #[test]
    fn a_format_2_transcript_loads_as_one_path() {
        let v2 = r#"{"version":2,"order":0,"title":"t","model":"m","thinking":false,
            "messages":[{"role":"system","text":"be brief"},{"role":"user","text":"hi"},
            {"role":"model","text":"hello","footer":"done"}]}"#;
        let chat: SavedChat = serde_json::from_str(v2).expect("a format 2 file reads");
        let (path, branches) = tree(chat.messages, chat.branches);
        let ids: Vec<u64> = path.iter().map(|m| m.id).collect();
        assert_eq!(ids, [1, 2, 3], "numbered in order");
        assert!(branches.is_empty());
        assert_eq!(path[2].footer.as_deref(), Some("done"));
    }

    #[test]
    fn a_tree_round_trips_and_a_broken_one_keeps_its_path() {
        let mut t = Tab::new(1, "t".into(), Default::default());
        t.push(Message::new(Role::User, "a"));
        t.push(Message::new(Role::Model, "A"));
        t.fork_at(1);
        t.push(Message::new(Role::Model, "A2"));
        let saved = saved_tree(&t);
        assert_eq!(saved.version, VERSION);
        assert_eq!(saved.messages[1].parent, Some(saved.messages[0].id));
        assert_eq!(saved.branches.len(), 1);
        assert_eq!(saved.branches[0].messages[0].parent, Some(1));
        let json = serde_json::to_string(&saved).expect("json");
        let back: SavedChat = serde_json::from_str(&json).expect("reads");
        let (path, branches) = tree(back.messages, back.branches);
        let key = |ms: &[Message]| -> Vec<(u64, String)> {
            ms.iter().map(|m| (m.id, m.text.clone())).collect()
        };
        assert_eq!(key(&path), key(&t.messages));
        assert_eq!(branches.len(), 1);
        assert_eq!(branches[0].parent, t.branches[0].parent);
        assert_eq!(key(&branches[0].messages), key(&t.branches[0].messages));
        // Repeated ids: numbered afresh, the branch kept where it hung; a branch from nowhere
        // (or from itself) hangs from the start.
        let (path, branches) = tree(
            vec![msg(5, None, "user", "a"), msg(5, Some(5), "model", "A")],
            vec![SavedBranch {
                parent: 5,
                messages: vec![msg(6, Some(5), "model", "B")],
            }],
        );
        assert_eq!(path.iter().map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(branches.len(), 1);
        assert_eq!((branches[0].parent, branches[0].messages[0].id), (1, 3));
        let (_, branches) = tree(
            vec![msg(1, None, "user", "a")],
            vec![
                SavedBranch {
                    parent: 9,
                    messages: vec![msg(2, Some(9), "model", "B")],
                },
                SavedBranch {
                    parent: 3,
                    messages: vec![msg(3, Some(3), "model", "C")],
                },
            ],
        );
        assert_eq!(
            branches.iter().map(|b| b.parent).collect::<Vec<_>>(),
            [0, 0]
        );
    }

    #[test]
    fn ids_near_the_top_are_numbered_afresh() {
        let (path, branches) = tree(
            vec![
                msg(u64::MAX - 1, None, "user", "a"),
                msg(u64::MAX, Some(u64::MAX - 1), "model", "A"),
            ],
            vec![SavedBranch {
                parent: u64::MAX - 1,
                messages: vec![msg(7, Some(u64::MAX - 1), "model", "B")],
            }],
        );
        assert_eq!(path.iter().map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((branches[0].parent, branches[0].messages[0].id), (1, 3));
    }
}
