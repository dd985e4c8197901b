//! The approval pane: in the input's place while a tool call waits in the shown tab, it names
//! the tool and its server, shows the arguments (pretty, cleaned of terminal controls, cut to
//! about half the screen), how many more calls wait, and the keys; or the note being typed to
//! deny the call with.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::theme::Theme;
use crate::app::App;
use gemma_protocol::text::short;

/// The keys, as the pane's last line shows them.
pub const KEYS: &str = "y once · t this tab · a always · n deny with a note · Esc deny";

/// The pane's lines (inside its border), when a call waits in the shown tab.
pub fn pane_lines(app: &App, theme: &Theme) -> Option<Vec<Line<'static>>> {
    let t = app.tab()?;
    let call = t.waiting_call()?;
    let (rows, hidden) = app.approval_args()?;
    let mut head = vec![
        Span::raw(" "),
        Span::styled(short(&call.name, 40), theme.accent),
        Span::styled(
            format!(" of {} wants to run with", short(&call.server, 30)),
            theme.dim,
        ),
    ];
    if t.approvals.len() > 1 {
        head.push(Span::styled(
            format!(" ({} more waiting)", t.approvals.len() - 1),
            theme.warn,
        ));
    }
    let mut lines = vec![Line::from(head)];
    lines.extend(
        rows.into_iter()
            .map(|r| Line::from(Span::raw(format!(" {r}")))),
    );
    if hidden > 0 {
        lines.push(Line::from(Span::styled(
            format!(" … {hidden} more lines"),
            theme.dim,
        )));
    }
    lines.push(match &t.note {
        Some(note) => Line::from(vec![
            Span::styled(" note for the model: ", theme.accent),
            Span::raw(note.text()),
            Span::styled("▏", theme.accent),
            Span::styled("  Enter denies with it · Esc back", theme.dim),
        ]),
        None => Line::from(Span::styled(format!(" {KEYS}"), theme.accent)),
    });
    Some(lines)
}

/// Draws the pane in `area` (the input's); false when no call waits.
pub fn render(f: &mut Frame, area: Rect, app: &App) -> bool {
    let theme = &Theme::named(app.theme);
    let Some(lines) = pane_lines(app, theme) else {
        return false;
    };
    f.render_widget(Clear, area);
    let block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme.warn)
        .title(Span::styled(" Run this tool? ", theme.warn));
    f.render_widget(Paragraph::new(lines).block(block), area);
    true
}
