//! The renderer's own state between frames ([`View`]): each tab's transcript laid out at the
//! current width, message by message, so that a long history is wrapped once and only the
//! message being streamed (whose revision moved) is laid out again. A cache and nothing more: a
//! fresh `View` draws the same frame.

use std::collections::HashMap;

use ratatui::text::Line;

use super::message::message_lines;
use super::theme::Theme;
use crate::app::tab::Tab;
use gemma_protocol::TabId;

/// What the renderer keeps between frames.
#[derive(Debug, Default)]
pub struct View {
    transcripts: HashMap<TabId, TranscriptLayout>,
}

/// One tab's transcript laid out at one width, in one theme.
#[derive(Debug, Default)]
pub struct TranscriptLayout {
    width: u16,
    show_thoughts: bool,
    theme: crate::config::Theme,
    blocks: Vec<Block>,
    total: usize,
}

/// One message's lines.
#[derive(Debug)]
struct Block {
    /// The message's revision when it was laid out.
    rev: u64,
    /// Code fences before it in the tab (its own are numbered from `base + 1`).
    base: usize,
    fences: usize,
    lines: Vec<Line<'static>>,
}

impl View {
    /// `tab`'s transcript at `width`, laying out again only the messages that changed.
    pub fn transcript(
        &mut self,
        tab: &Tab,
        width: u16,
        theme_name: crate::config::Theme,
        show_thoughts: bool,
    ) -> &TranscriptLayout {
        let l = self.transcripts.entry(tab.id).or_default();
        if l.width != width || l.show_thoughts != show_thoughts || l.theme != theme_name {
            *l = TranscriptLayout {
                width,
                show_thoughts,
                theme: theme_name,
                ..TranscriptLayout::default()
            };
        }
        let theme = Theme::named(theme_name);
        l.blocks.truncate(tab.messages.len());
        let mut base = 0;
        for (i, m) in tab.messages.iter().enumerate() {
            let fresh = l
                .blocks
                .get(i)
                .is_some_and(|b| b.rev == m.rev && b.base == base);
            if !fresh {
                let (lines, fences) = message_lines(m, width as usize, &theme, base, show_thoughts);
                let block = Block {
                    rev: m.rev,
                    base,
                    fences,
                    lines,
                };
                match l.blocks.get_mut(i) {
                    Some(b) => *b = block,
                    None => l.blocks.push(block),
                }
            }
            base += l.blocks[i].fences;
        }
        l.total = l.blocks.iter().map(|b| b.lines.len()).sum();
        l
    }

    /// Forgets the tabs that are no longer open.
    pub fn retain(&mut self, open: impl Fn(TabId) -> bool) {
        self.transcripts.retain(|id, _| open(*id));
    }
}

impl TranscriptLayout {
    /// Lines in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The line message `i` starts at.
    pub fn start_of(&self, i: usize) -> usize {
        self.blocks.iter().take(i).map(|b| b.lines.len()).sum()
    }

    /// The line each message starts at.
    pub fn starts(&self) -> Vec<usize> {
        let mut at = 0;
        self.blocks
            .iter()
            .map(|b| {
                let s = at;
                at += b.lines.len();
                s
            })
            .collect()
    }

    /// Lines `from..from + count`, across messages.
    pub fn lines(&self, from: usize, count: usize) -> Vec<Line<'static>> {
        self.blocks
            .iter()
            .flat_map(|b| &b.lines)
            .skip(from)
            .take(count)
            .cloned()
            .collect()
    }
}
