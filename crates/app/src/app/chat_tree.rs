//! A tab as its chat file holds it and back: the path shown, every branch of the conversation
//! tree (ids and parents), each message's role as the file names it, its pictures, text files
//! and tool calls, and the tab's tools (read back, repaired where needed, by
//! [`super::chat_load`]).

pub use super::chat_load::tree;

use super::attachments::{Chip, Sound};
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
        written: r.written.clone(),
        at: r.at,
        handover: r.handover,
        structured: r.structured.clone(),
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
        written: t.written,
        at: t.at,
        handover: t.handover,
        structured: t.structured,
    }
}

/// The tab's tools as saved, when they are not the defaults.
fn saved_tools(t: &Tab) -> Option<SavedTools> {
    let (selection, only) = match &t.choices.tools {
        ToolSelection::All => ("all", Vec::new()),
        ToolSelection::Off => ("off", Vec::new()),
        ToolSelection::Only(names) => ("only", names.clone()),
    };
    let saved = SavedTools {
        selection: selection.into(),
        only,
        choice: t.choices.tool_choice.as_str().into(),
    };
    (t.choices.tools != ToolSelection::All || t.choices.tool_choice != ToolChoice::Auto)
        .then_some(saved)
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

pub(super) fn message(m: SavedMessage) -> Message {
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
        speculation: None,
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
    let sampling = SavedSampling::new(
        t.choices.sampling,
        t.choices.max_new_tokens,
        t.preset.clone(),
    );
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

#[cfg(test)]
#[path = "chat_tree_tests.rs"]
mod tests;
