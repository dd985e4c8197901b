//! The help overlay (F1): every key of the keymap with what it does, in one or two columns, the
//! typed commands and the tool-call keys under them; it scrolls when taller than the screen.

use ratatui::Frame;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

use super::popup;
use super::theme::Theme;
use crate::app::App;
use crate::config::action::Action;

/// Columns the help's footer lines take at most.
const FOOTER_WIDTH: usize = 92;

/// Draws the help overlay.
pub fn help(f: &mut Frame, app: &App) {
    let theme = &Theme::named(app.theme);
    // Alt+1..Alt+9 make one entry.
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut gotos = Vec::new();
    for (action, keys) in app.keymap.bindings() {
        match action {
            Action::GotoTab(_) => gotos.extend(keys),
            a => entries.push((keys.join(", "), a.describe())),
        }
    }
    if let (Some(first), Some(last)) = (gotos.first(), gotos.last()) {
        entries.push((format!("{first}..{last}"), "go to tab N".into()));
    }
    let key_w = entries.iter().map(|(k, _)| k.width()).max().unwrap_or(0) + 2;
    let entry_w = key_w + entries.iter().map(|(_, d)| d.width()).max().unwrap_or(0);
    // The typed commands from their table (`app::slash::COMMANDS`), then the tool-call keys.
    let mut footer = crate::app::slash::help_lines(FOOTER_WIDTH);
    footer.extend(
        [
            "Tool call: y once · t this tab · a always · n deny with a note · Esc deny;",
            "          Enter on a selected answer opens or folds its tool calls.",
            "Up/Down scroll · any other key closes this help.",
        ]
        .map(String::from),
    );
    // Two columns when one does not fit the screen's height.
    let room = app.size.1.saturating_sub(2 + footer.len() as u16 + 1) as usize;
    let columns = if entries.len() > room && app.size.0 as usize >= 2 * entry_w + 6 {
        2
    } else {
        1
    };
    let rows = entries.len().div_ceil(columns);
    let mut lines = Vec::new();
    for r in 0..rows {
        let mut spans = Vec::new();
        for c in 0..columns {
            if let Some((k, d)) = entries.get(c * rows + r) {
                spans.push(Span::styled(format!("{k:<key_w$}"), theme.accent));
                let pad = if c + 1 < columns {
                    entry_w - key_w + 3
                } else {
                    0
                };
                spans.push(Span::raw(format!("{d:<pad$}")));
            }
        }
        lines.push(Line::from(spans));
    }
    lines.push(Line::default());
    for text in &footer {
        lines.push(Line::from(Span::styled(text, theme.dim)));
    }
    let w = (columns * (entry_w + 3)).max(footer[0].width()) as u16 + 2;
    let h = lines.len() as u16 + 2;
    // Taller than the screen: it scrolls, and the title says how far.
    let visible = app.size.1.saturating_sub(2).max(1);
    let scroll = app
        .help_scroll
        .min((lines.len() as u16).saturating_sub(visible));
    let title = if h > app.size.1 {
        format!(
            " Keys ({}-{} of {}, Up/Down scroll) ",
            scroll + 1,
            (scroll + visible).min(lines.len() as u16),
            lines.len()
        )
    } else {
        " Keys ".to_string()
    };
    let lines = lines.into_iter().skip(scroll as usize).collect();
    popup(f, app, &title, lines, w, h);
}
