//! Chats out and in: a saved chat as Markdown a person reads (code blocks kept as written,
//! thoughts, attached files and tool calls folded) or as JSON (the chat file's own format, which
//! `import` reads back), and imports from that JSON or from ChatGPT's `conversations.json` export.

use serde_json::Value;

use super::chatgpt::chatgpt;
use super::fmt::{human_bytes, short};
use super::{SavedChat, SavedFile, SavedTool, VERSION};
use crate::attach::fence;

/// `dir/stem.ext`, or `dir/stem-2.ext`, `-3`… when taken (by a file, a link or anything else).
pub fn free_name(dir: &std::path::Path, stem: &str, ext: &str) -> std::path::PathBuf {
    (1..)
        .map(|n| match n {
            1 => dir.join(format!("{stem}.{ext}")),
            n => dir.join(format!("{stem}-{n}.{ext}")),
        })
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .unwrap_or_else(|| dir.join(format!("{stem}.{ext}")))
}

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Markdown.
    Markdown,
    /// The chat file's JSON.
    Json,
}

impl Format {
    /// `md` or `json`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "md" | "markdown" => Some(Format::Markdown),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Json => "json",
        }
    }
}

/// `chat` in `format`.
pub fn export(chat: &SavedChat, format: Format) -> String {
    match format {
        Format::Markdown => markdown(chat),
        Format::Json => serde_json::to_string_pretty(chat).unwrap_or_default() + "\n",
    }
}

/// A chat as Markdown: a heading per message, the text as written (so code fences stay code),
/// thoughts in a `<details>` block, notices and errors as quotes.
pub fn markdown(chat: &SavedChat) -> String {
    let mut out = format!("# {}\n\n", one_line(&chat.title));
    if !chat.model.is_empty() {
        out.push_str(&format!("*gemma-chat · {}*\n\n", one_line(&chat.model)));
    }
    for m in &chat.messages {
        match m.role.as_str() {
            "system" => out.push_str(&format!("## System prompt\n\n{}\n\n", m.text.trim_end())),
            "user" => {
                out.push_str("## You\n\n");
                for i in &m.images {
                    let name = std::path::Path::new(&i.path)
                        .file_name()
                        .map_or_else(|| i.path.clone(), |n| n.to_string_lossy().into_owned());
                    // The label shown: no control characters, no brackets that end it.
                    let name: String = name
                        .chars()
                        .filter(|c| !c.is_control() && !matches!(c, '[' | ']'))
                        .collect();
                    let link = link_target(&i.path);
                    if i.audio.is_some() {
                        out.push_str(&format!("[audio: {name}]({link})\n\n"));
                    } else {
                        out.push_str(&format!("![{name}]({link})\n\n"));
                    }
                }
                for f in &m.files {
                    out.push_str(&file_markdown(f));
                }
                out.push_str(&format!("{}\n\n", m.text.trim_end()));
            }
            "model" => {
                out.push_str("## Gemma\n\n");
                if !m.thought.trim().is_empty() {
                    out.push_str(&format!(
                        "<details><summary>Thought</summary>\n\n{}\n\n</details>\n\n",
                        m.thought.trim()
                    ));
                }
                if !m.text.trim().is_empty() {
                    out.push_str(&format!("{}\n\n", m.text.trim()));
                }
                for t in &m.tools {
                    out.push_str(&tool_markdown(t));
                }
                if let Some(f) = &m.footer {
                    out.push_str(&format!("*{}*\n\n", one_line(f)));
                }
            }
            _ => {
                for line in m.text.lines() {
                    out.push_str(&format!("> {line}\n"));
                }
                out.push('\n');
            }
        }
    }
    out
}

/// A file's path as a markdown link target: every byte but letters, digits, `-_.~/`
/// percent-encoded, so that a name with spaces, brackets or control characters still names the
/// file (the chat keeps the path absolute since attachments are resolved when attached).
fn link_target(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A tool call as Markdown: a folded block whose summary is the transcript's collapsed line,
/// holding the arguments (pretty JSON) and what the model was given.
fn tool_markdown(t: &SavedTool) -> String {
    let outcome = match t.status.as_str() {
        "ok" => human_bytes(t.bytes),
        s => s.to_string(),
    };
    let args = one_line(&t.arguments);
    let args = if args.chars().count() > 60 {
        format!("{}…", args.chars().take(60).collect::<String>())
    } else {
        args
    };
    let summary = format!("tool {}({args}) → {outcome}", one_line(&t.name))
        .replace('&', "&amp;")
        .replace('<', "&lt;");
    let pretty = serde_json::from_str::<Value>(&t.arguments)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| t.arguments.clone());
    let result = t.result.trim_end();
    format!(
        "<details><summary>{summary}</summary>\n\nArguments (server {}):\n\n{}json\n{pretty}\n{}\n\n\
         Result:\n\n{}\n{result}\n{}\n\n</details>\n\n",
        one_line(&t.server),
        fence(&pretty),
        fence(&pretty),
        fence(result),
        fence(result),
    )
}

/// An attached text file as Markdown: a folded block whose summary names it and its size,
/// holding its contents in a fence of its language.
fn file_markdown(f: &SavedFile) -> String {
    let name = one_line(&f.name).replace('&', "&amp;").replace('<', "&lt;");
    let body = f.text.strip_suffix('\n').unwrap_or(&f.text);
    let lang = crate::attach::language(&f.name).unwrap_or("");
    format!(
        "<details><summary>File: {name} ({})</summary>\n\n{}{lang}\n{body}\n{}\n\n</details>\n\n",
        human_bytes(f.text.len()),
        fence(body),
        fence(body),
    )
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A file name for `chat` (its title, made safe), without extension.
pub fn file_stem(chat: &SavedChat) -> String {
    let stem: String = chat
        .title
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '-' })
        .collect();
    let stem = stem.trim_matches('-');
    let stem: String = stem.chars().take(60).collect();
    if stem.is_empty() { "chat".into() } else { stem }
}

/// What an import brought: the chats, and a line for each thing left out or changed.
#[derive(Debug, Default)]
pub struct Imported {
    /// The chats, in the file's order.
    pub chats: Vec<SavedChat>,
    /// What was left out or changed, and why, one line each (naming the chat).
    pub notes: Vec<String>,
}

/// Reads chats from `text`: a gemma-chat JSON export (one chat or a list) or ChatGPT's
/// `conversations.json`. A chat with no message is left out with a note.
pub fn import(text: &str) -> Result<Imported, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let items: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    let mut out = Imported::default();
    for (i, item) in items.iter().enumerate() {
        let (chat, notes) = if item.get("mapping").is_some() {
            chatgpt(item)
        } else {
            serde_json::from_value::<SavedChat>((*item).clone())
                .map(|c| (c, Vec::new()))
                .map_err(|e| format!("chat {}: not a gemma-chat or ChatGPT chat ({e})", i + 1))
        }?;
        let name = format!("chat {} ({:?})", i + 1, short(&chat.title));
        out.notes
            .extend(notes.into_iter().map(|n| format!("{name}: {n}")));
        if chat.messages.is_empty() {
            out.notes
                .push(format!("{name}: no user or model message on it; left out"));
            continue;
        }
        out.chats.push(SavedChat {
            version: VERSION,
            order: 1_000 + out.chats.len(),
            ..chat
        });
    }
    if out.chats.is_empty() {
        return Err("no chat with messages in it".into());
    }
    Ok(out)
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
