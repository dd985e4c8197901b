//! Search across every chat (Ctrl+F): an overlay that lists, as you type, the messages that hold
//! the text (case-insensitive for ASCII; attached files and an answer's tool calls too) in the
//! open tabs, then in the closed tabs' saved chats, with the tab and a snippet; Enter opens that
//! tab (reopening a closed chat) at that message, scrolled to it and highlighted.

use aho_corasick::AhoCorasick;
use crossterm::event::{KeyCode, KeyEvent};

use super::chat_tree::role_of;
use super::editor::Editor;
use super::tab::{Role, Tab};
use super::{App, Overlay};
use crate::chats::SavedChat;
use gemma_protocol::{Command, TabId};

/// Most hits listed.
pub const MAX_HITS: usize = 200;

/// The search overlay's state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchState {
    /// What is typed.
    pub query: Editor,
    /// The messages found, best first (the active tab's, then the others', newest first).
    pub hits: Vec<Hit>,
    /// The hit Enter opens.
    pub selected: usize,
}

/// One message that holds the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Its tab.
    pub tab: TabId,
    /// The tab's title.
    pub title: String,
    /// The message's index in the tab.
    pub message: usize,
    /// Who wrote it.
    pub role: Role,
    /// The text around the match, on one line.
    pub snippet: String,
    /// The file name of the closed chat it is in (`tab` is 0 then).
    pub closed: Option<String>,
}

/// The messages of `tabs` that hold `query` (ASCII case-insensitive), at most `limit`.
pub fn search<'a>(tabs: impl IntoIterator<Item = &'a Tab>, query: &str, limit: usize) -> Vec<Hit> {
    let chats = tabs.into_iter().map(|t| Chat {
        tab: t.id,
        title: &t.title,
        closed: None,
        messages: t.messages.iter().map(|m| {
            let files = m.files.iter().flat_map(|f| [f.name(), f.text()]);
            let tools = m.tools.iter().flat_map(|r| r.searchable());
            let extra = files.map(|f| (FILE, f)).chain(tools.map(|t| (TOOL, t)));
            (m.role, m.text.as_str(), extra.collect())
        }),
    });
    search_chats(chats, query, limit)
}

/// The messages of the closed chats `closed` that hold `query`, at most `limit`, most recently
/// closed first.
pub fn search_closed(closed: &[(String, SavedChat)], query: &str, limit: usize) -> Vec<Hit> {
    let chats = closed.iter().rev().map(|(uid, c)| Chat {
        tab: 0,
        title: &c.title,
        closed: Some(uid),
        messages: c.messages.iter().map(|m| {
            let files = m
                .files
                .iter()
                .flat_map(|f| [f.name.as_str(), f.text.as_str()]);
            let tools = m
                .tools
                .iter()
                .flat_map(|t| [t.name.as_str(), t.arguments.as_str(), t.result.as_str()]);
            let extra = files.map(|f| (FILE, f)).chain(tools.map(|t| (TOOL, t)));
            (role_of(&m.role), m.text.as_str(), extra.collect())
        }),
    });
    search_chats(chats, query, limit)
}

/// What a hit in a message's attached file starts its snippet with.
const FILE: &str = "file: ";
/// What a hit in an answer's tool call starts its snippet with.
const TOOL: &str = "tool: ";

/// One chat as search reads it: where its hits lead, and its messages oldest first, each with
/// the texts of its attached files (names, contents) and tool calls (names, arguments,
/// results), each after the lead its snippet takes.
struct Chat<'a, I> {
    tab: TabId,
    title: &'a str,
    closed: Option<&'a str>,
    messages: I,
}

/// The messages of `chats` that hold `query`, each chat's newest first, at most `limit`.
fn search_chats<'a, I>(
    chats: impl Iterator<Item = Chat<'a, I>>,
    query: &str,
    limit: usize,
) -> Vec<Hit>
where
    I: DoubleEndedIterator<Item = (Role, &'a str, Vec<(&'static str, &'a str)>)>
        + ExactSizeIterator,
{
    let mut hits = Vec::new();
    let Some(finder) = finder(query) else {
        return hits;
    };
    for chat in chats {
        for (i, (role, text, extra)) in chat.messages.enumerate().rev() {
            if !matches!(role, Role::User | Role::Model | Role::System) {
                continue;
            }
            // The message's own text first, then its files' and its tool calls'.
            let found = std::iter::once((text, ""))
                .chain(extra.into_iter().map(|(lead, t)| (t, lead)))
                .find_map(|(t, lead)| finder.find(t).map(|f| (t, lead, f)));
            if let Some((text, lead, found)) = found {
                hits.push(Hit {
                    tab: chat.tab,
                    title: chat.title.to_string(),
                    message: i,
                    role,
                    snippet: format!("{lead}{}", snippet(text, found.start(), found.end())),
                    closed: chat.closed.map(String::from),
                });
                if hits.len() >= limit {
                    return hits;
                }
            }
        }
    }
    hits
}

/// A case-insensitive (ASCII) finder for `query`; `None` for a blank one.
fn finder(query: &str) -> Option<AhoCorasick> {
    let query = query.trim();
    if query.is_empty() {
        return None;
    }
    AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build([query])
        .ok()
}

/// About 30 characters either side of `start..end`, whitespace folded to single spaces.
fn snippet(text: &str, start: usize, end: usize) -> String {
    let before: String = {
        let b: Vec<char> = text[..start].chars().rev().take(30).collect();
        b.into_iter().rev().collect()
    };
    let after: String = text[end..].chars().take(50).collect();
    let lead = if before.chars().count() == 30 {
        "…"
    } else {
        ""
    };
    let tail = if text[end..].chars().nth(50).is_some() {
        "…"
    } else {
        ""
    };
    let joined = format!("{lead}{before}{}{after}{tail}", &text[start..end]);
    // A tool's result is a server's text: nothing of it drives the terminal.
    gemma_protocol::text::one_line(&joined)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

impl App {
    /// Opens the search overlay.
    pub(super) fn open_search(&mut self) {
        self.overlay = Overlay::Search(SearchState::default());
    }

    /// Keys in the search overlay: typing searches, Up/Down pick, Enter opens, Esc closes.
    pub(super) fn search_key(&mut self, mut s: SearchState, k: &KeyEvent) -> Vec<Command> {
        match k.code {
            KeyCode::Esc => return Vec::new(),
            KeyCode::Up => s.selected = s.selected.saturating_sub(1),
            KeyCode::Down => s.selected = (s.selected + 1).min(s.hits.len().saturating_sub(1)),
            KeyCode::Enter => {
                if let Some(hit) = s.hits.get(s.selected).cloned() {
                    return self.open_hit(&hit);
                }
            }
            _ => {
                super::keys::edit(&mut s.query, k);
                // The active tab's hits first.
                let active = self.active;
                let order = self.tabs.get(active).into_iter().chain(
                    self.tabs
                        .iter()
                        .enumerate()
                        .filter(move |(i, _)| *i != active)
                        .map(|(_, t)| t),
                );
                s.hits = search(order, &s.query.text(), MAX_HITS);
                let room = MAX_HITS - s.hits.len();
                s.hits
                    .extend(search_closed(&self.closed, &s.query.text(), room));
                s.selected = 0;
            }
        }
        self.overlay = Overlay::Search(s);
        Vec::new()
    }

    /// Shows `hit`: its tab active (a closed chat reopened as a new tab), the view at its
    /// message, which is highlighted.
    fn open_hit(&mut self, hit: &Hit) -> Vec<Command> {
        let mut cmds = Vec::new();
        let mut tab = hit.tab;
        if let Some(uid) = &hit.closed
            && let Some(k) = self.closed.iter().position(|(u, _)| u == uid)
        {
            let (uid, chat) = self.closed.remove(k);
            self.saves.push(crate::chats::SaveJob::Reopen(uid.clone()));
            cmds = self.restore_one(uid, chat);
            tab = self.tabs[self.active].id;
            self.flash = Some("reopened a closed chat".into());
        }
        if let Some(i) = self.tabs.iter().position(|t| t.id == tab) {
            self.active = i;
            let t = &mut self.tabs[i];
            t.pin = None;
            t.focus = Some(hit.message);
            t.touched(hit.message);
        }
        cmds
    }
}
