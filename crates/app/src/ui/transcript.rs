//! The transcript: the visible window of the active tab's laid-out lines ([`View`]) with a "new
//! output" hint, or the start-up screen while there is no tab.

use ratatui::Frame;
use ratatui::layout::{Alignment, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use super::theme::Theme;
use super::view::View;
use crate::app::{App, Loading};
use gemma_protocol::ProgressUnit;

/// Draws the active tab's transcript in `area`, or the start-up screen while there is none;
/// returns the transcript's length in lines (what scrolling is bounded by), where a found or
/// selected message put the top of the view, and the line each message starts at.
pub fn render(
    f: &mut Frame,
    area: Rect,
    app: &App,
    view: &mut View,
) -> Option<(usize, Option<usize>, Vec<usize>)> {
    let theme = &Theme::named(app.theme);
    let tab = app.tab()?;
    if tab.messages.is_empty() {
        f.render_widget(welcome(app), area);
        return Some((0, None, Vec::new()));
    }
    let layout = view.transcript(tab, area.width, app.theme, app.show_thoughts);
    let height = area.height as usize;
    // A message found by search: at the top of the view (once; the app pins it there), marked.
    let bottom = layout.total().saturating_sub(height);
    let found = tab.focus.filter(|&i| i < tab.messages.len());
    let selected = tab.selected.filter(|&i| i < tab.messages.len());
    let shown_top = tab.view_top(layout.total(), height);
    let focus_top = match selected {
        // A selected message is brought into view when it is out of it.
        Some(i) => {
            let start = layout.start_of(i);
            (start < shown_top || start >= shown_top + height).then_some(start.min(bottom))
        }
        None => found
            .filter(|_| tab.pin.is_none())
            .map(|i| layout.start_of(i).min(bottom)),
    };
    let top = focus_top.unwrap_or(shown_top);
    let mut lines = layout.lines(top, height);
    let mark = match (selected, found) {
        (Some(i), _) => Some((i, " ◀ selected")),
        (None, Some(i)) => Some((i, " ◀ found")),
        (None, None) => None,
    };
    if let Some((i, label)) = mark
        && let Some(line) = layout
            .start_of(i)
            .checked_sub(top)
            .and_then(|k| lines.get_mut(k))
    {
        line.spans.push(Span::styled(label, theme.tab_active));
    }
    f.render_widget(Paragraph::new(lines), area);
    if tab.pin.is_some() && tab.new_output && area.height > 0 {
        let hint = " new output ↓ (End) ";
        let w = (hint.chars().count() as u16).min(area.width);
        let r = Rect::new(area.right() - w, area.bottom() - 1, w, 1);
        f.render_widget(Paragraph::new(Span::styled(hint, theme.tab_active)), r);
    }
    Some((layout.total(), focus_top, layout.starts()))
}

/// What an empty tab shows: loading progress, a load error with what to do, or a greeting.
fn welcome(app: &App) -> Paragraph<'static> {
    let theme = &Theme::named(app.theme);
    let m = &app.model;
    let mut lines: Vec<Line<'static>> = Vec::new();
    if let Some(err) = &m.load_error {
        lines.push(Line::from(Span::styled(
            "The model could not be loaded",
            theme.error,
        )));
        lines.push(Line::default());
        lines.push(Line::from(err.clone()));
        lines.push(Line::default());
        lines.push(Line::from(Span::styled(
            "Set [model] path in the config (`gemma-chat config path` shows where it is), or \
             start with `gemma-chat --model PATH`. Press Ctrl+Q to quit.",
            theme.dim,
        )));
    } else if !m.ready {
        lines.push(Line::from(Span::styled("Starting gemma-chat", theme.model)));
        lines.push(Line::default());
        let Loading {
            stage,
            done,
            total,
            unit,
        } = &m.loading;
        let progress = if *total > 0 {
            let width = 30;
            let done = (*done).min(*total);
            let filled = done * width / total;
            let count = match unit {
                ProgressUnit::Layers => format!("{done}/{total}"),
                ProgressUnit::Bytes => format!(
                    "{:.1}/{:.1} MB ({}%)",
                    done as f64 / 1e6,
                    *total as f64 / 1e6,
                    done * 100 / total
                ),
            };
            format!(
                "{stage}: [{}{}] {count}",
                "█".repeat(filled),
                "░".repeat(width - filled)
            )
        } else {
            format!("{stage}…")
        };
        lines.push(Line::from(progress));
        lines.push(Line::default());
        lines.push(Line::from(Span::styled(
            "You can type your first message now; it is sent when the model is ready.",
            theme.dim,
        )));
    } else {
        lines.push(Line::from(Span::styled(
            format!("Ready: {}", m.name),
            theme.model,
        )));
        lines.push(Line::default());
        let help = app.keymap_hint();
        lines.push(Line::from(Span::styled(
            format!("Type a message and press Enter. {help}"),
            theme.dim,
        )));
    }
    Paragraph::new(lines)
        .alignment(Alignment::Left)
        .wrap(Wrap { trim: false })
        .block(Block::new().borders(Borders::NONE))
}
