//! The chat file's format ([`SavedChat`], version 4): the path a tab shows, each message with its
//! id and its parent's, the other branches of its conversation tree, the tab's own sampling and
//! tools, each answer's stats and tool calls, each message's attached text files. Version 3 files (no tools) load as they are;
//! version 2 files (the transcript only) load as a tree of one path; a file whose ids do not make
//! a tree (hand-edited) loads its path alone, numbered afresh.

use serde::{Deserialize, Serialize};

use gemma_protocol::SamplingLayer;

/// The format's version: 6 keeps each tool call as the model wrote it, where in the answer, and
/// its response as the model read it (a rebuilt conversation writes them again); 5 names a message's pictures and recordings `media` (4 and earlier:
/// `images`, still read) and may hold a message sent whose turn had not ended (`unsent`); 4 adds
/// tool calls and the tab's tools; 3 holds the conversation tree;
/// 2 held the transcript only; 1 also held the conversation in ids, which is read once, for the
/// engine to take over. Every field a version added is optional, so that reading an older file
/// is the migration.
pub const VERSION: u32 = 6;

/// One saved tab.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SavedChat {
    /// Format version.
    pub version: u32,
    /// Position in the tab bar.
    pub order: usize,
    /// Tab title.
    pub title: String,
    /// The model the chat was made with.
    pub model: String,
    /// Gemma 4 thinking (read by earlier releases; `thinking_level` says how much).
    pub thinking: bool,
    /// The thinking level (`off`, `low`, `medium`, `high`, `unbounded` or thought tokens); absent
    /// in files of earlier releases, whose `thinking = true` reads as `medium`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// The path the tab shows, oldest first.
    pub messages: Vec<SavedMessage>,
    /// The other branches of the conversation tree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<SavedBranch>,
    /// The tab's own sampling, over the config's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SavedSampling>,
    /// The tools the tab declares and its tool choice, when not the defaults (version 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<SavedTools>,
    /// Version 1 only: the conversation in token ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<u32>,
    /// Version 1 only: header ids after BOS.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub header: usize,
    /// Version 1 only: where the last answer starts in `ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_answer: Option<usize>,
    /// A message sent whose turn had not ended when this was written: saved when it is sent, so
    /// that a crash or a kill while it waits (for a tool's approval, a picture's encoding) does
    /// not lose it; it goes back to the editor at the next start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<Unsent>,
}

/// A sent message whose answer never came (see [`SavedChat::unsent`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unsent {
    /// The message as it was sent (its text, pictures and files).
    pub message: SavedMessage,
    /// The message of the path it is a new version of (an edit), by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edits: Option<u64>,
}

/// Largest message id taken as it is: ids are counted up from 1, so anything near 2^64 is a
/// crafted file (and the next id would wrap).
pub const MAX_ID: u64 = 1 << 48;

/// What is wrong with a chat's tree as the file holds it (format 3 on, which numbers its
/// messages): repeated ids, ids out of range, or a path message whose parent is not the message
/// before it. `None` when it is sound; the app repairs the others as it reads them.
pub fn tree_fault(chat: &SavedChat) -> Option<String> {
    if chat.version < 3 {
        return None;
    }
    let all = chat
        .messages
        .iter()
        .chain(chat.branches.iter().flat_map(|b| &b.messages));
    let mut seen = std::collections::HashSet::new();
    // Id 0 is none given (a hand-written file): numbered, not a fault.
    for m in all.filter(|m| m.id != 0) {
        if m.id > MAX_ID {
            return Some(format!("message id {} is out of range", m.id));
        }
        if !seen.insert(m.id) {
            return Some(format!("message id {} is used twice", m.id));
        }
    }
    let mut prev = None;
    for m in chat.messages.iter().filter(|m| m.role != "system") {
        if m.parent.is_some() && m.parent != prev {
            return Some(format!(
                "message {} of the path does not follow the one before it",
                m.id
            ));
        }
        prev = Some(m.id);
    }
    None
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

impl SavedChat {
    /// The tab's thinking level: `thinking_level`, else the old switch (on: medium).
    pub fn level(&self) -> crate::config::Thinking {
        use crate::config::Thinking;
        let old = if self.thinking {
            Thinking::Medium
        } else {
            Thinking::Off
        };
        self.thinking_level
            .as_deref()
            .and_then(|l| Thinking::parse(l).ok())
            .unwrap_or(old)
    }

    /// Keeps `level` in the file, readable by earlier releases as on or off.
    pub fn set_level(&mut self, level: crate::config::Thinking) {
        self.thinking = level.is_on();
        self.thinking_level = level.is_on().then(|| level.name());
    }
}

/// One saved message.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SavedMessage {
    /// Its id in the tab's tree (0 or absent: version 2).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub id: u64,
    /// The id of the message it follows (absent at the start, and for the system prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// `user`, `model`, `notice`, `error` or `system` (the system prompt, first).
    pub role: String,
    /// Its text.
    pub text: String,
    /// The thought, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thought: String,
    /// The footer, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
    /// What the answer cost, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<SavedStats>,
    /// The pictures and recordings sent with it: where they were, their budget and size, a
    /// recording's length (`media`; files of format 4 and earlier say `images`).
    #[serde(
        default,
        rename = "media",
        alias = "images",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub images: Vec<SavedImage>,
    /// The text files sent with it, their contents as they were sent (absent in files written
    /// before `/attach` took text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SavedFile>,
    /// The tools the answer called, in order (version 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<SavedTool>,
}

/// A text file sent with a message, kept whole: the message reads the same after the file
/// changes or goes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SavedFile {
    /// Its name as sent (the path as given, `~/…` under the home directory).
    pub name: String,
    /// Its contents.
    pub text: String,
}

/// A tool call an answer made, and what came of it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SavedTool {
    /// The call's id in its tab.
    pub id: u64,
    /// The tool.
    pub name: String,
    /// Its server (`builtin` for a built-in).
    pub server: String,
    /// The arguments, JSON text.
    pub arguments: String,
    /// `ok`, `failed`, `denied` or `stopped`.
    pub status: String,
    /// What the model was given as the tool's response.
    #[serde(default)]
    pub result: String,
    /// Bytes the tool returned, before any cut.
    #[serde(default)]
    pub bytes: usize,
    /// Seconds it ran.
    #[serde(default)]
    pub seconds: f64,
    /// The call as the model wrote it, in its own syntax (absent in files of format 5 and
    /// earlier, and for a server's calls: such a call is not written again when the
    /// conversation is rebuilt).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub written: String,
    /// Bytes of the answer's text before the call's hand-over.
    #[serde(default)]
    pub at: usize,
    /// The hand-over's number in its turn.
    #[serde(default)]
    pub handover: usize,
    /// The response as the model read it when it was an object, JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<String>,
}

/// The tools a tab declares (`all`, `off` or the names in `only`) and its tool choice.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SavedTools {
    /// `all`, `off` or `only`.
    pub selection: String,
    /// With `only`: servers and `server.tool` names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    /// `auto`, `required` or `none`.
    pub choice: String,
}

/// A picture or a recording sent with a message, by reference.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SavedImage {
    /// Its file when it was sent.
    pub path: String,
    /// Soft tokens at most.
    pub tokens: usize,
    /// Width and height in pixels (a recording: 0 × 0).
    pub size: (u32, u32),
    /// A recording's length and soft tokens; absent for a picture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<SavedSound>,
}

/// A recording sent with a message: its length and the soft tokens it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SavedSound {
    /// Its length in milliseconds.
    pub ms: u64,
    /// Soft tokens, every piece's together.
    pub tokens: usize,
    /// 30-second pieces.
    pub pieces: usize,
}

impl SavedMessage {
    /// A message with its role and text only.
    pub fn new(role: &str, text: &str) -> Self {
        Self {
            role: role.into(),
            text: text.into(),
            ..Self::default()
        }
    }
}

/// Messages that left the shown path, from one message on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SavedBranch {
    /// The message they follow (0: the start of the conversation).
    pub parent: u64,
    /// The messages, each the parent of the next.
    pub messages: Vec<SavedMessage>,
}

/// A turn's stats as saved.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SavedStats {
    /// How the cache was reused (`new`, `exact_prefix`, `rewind`, …).
    pub reuse: String,
    /// Prompt tokens that were resident.
    pub reused_tokens: usize,
    /// Prompt tokens prefilled.
    pub prefilled_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Prefill speed.
    pub prefill_tok_s: f64,
    /// Decode speed.
    pub decode_tok_s: f64,
    /// Seconds to the first token.
    pub ttft_s: f64,
    /// Tool calls in the turn (version 4).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: usize,
    /// Tokens of tool responses fed inside the turn (version 4).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_tokens: usize,
    /// Thought tokens of the turn.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub thought_tokens: usize,
}

/// The tab's own sampling as saved (what it sets over the config and the model).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SavedSampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    top_k: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    /// Most tokens per answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// The preset the tab took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

impl SavedSampling {
    /// A tab's overrides, answer length and preset, as saved.
    pub fn new(
        layer: SamplingLayer,
        max_new_tokens: Option<usize>,
        preset: Option<String>,
    ) -> Self {
        Self {
            temperature: layer.temperature,
            top_k: layer.top_k,
            top_p: layer.top_p,
            min_p: layer.min_p,
            seed: layer.seed,
            max_new_tokens,
            preset,
        }
    }

    /// The sampling layer it sets.
    pub fn layer(&self) -> SamplingLayer {
        SamplingLayer {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of format 4 names a message's pictures `images`; today's says `media`, and reads
    /// both.
    #[test]
    fn media_is_read_under_its_old_name_and_written_under_its_new_one() {
        let v4 = r#"{"version":4,"order":0,"title":"t","model":"m","thinking":false,
            "messages":[{"id":1,"role":"user","text":"what?","images":[
              {"path":"/tmp/a.png","tokens":280,"size":[64,48]},
              {"path":"/tmp/r.wav","tokens":0,"size":[0,0],"audio":{"ms":1200,"tokens":30,"pieces":1}}]}]}"#;
        let chat: SavedChat = serde_json::from_str(v4).expect("format 4 reads");
        assert_eq!(chat.messages[0].images.len(), 2);
        assert!(chat.messages[0].images[1].audio.is_some());
        let again = serde_json::to_value(SavedChat {
            version: VERSION,
            ..chat
        })
        .expect("json");
        assert_eq!(again["version"], VERSION);
        assert_eq!(
            again["messages"][0]["media"].as_array().map(Vec::len),
            Some(2)
        );
        assert!(again["messages"][0].get("images").is_none());
    }
}
