//! One message as styled lines: its name (with ‹n/m› when its turn has versions), the chips of
//! its pictures and files, its thought (folded or not), its markdown body with numbered code fences, its
//! tool calls (`tool_lines`), and its footer.

use ratatui::text::{Line, Span};

use super::markdown;
use super::theme::Theme;
use super::tool_lines::tool_lines;
use crate::app::tab::{Message, Role};

/// The lines of one message at `width`; code fences are numbered from `code_base + 1`. Returns
/// the lines and the number of fences.
pub fn message_lines(
    m: &Message,
    width: usize,
    theme: &Theme,
    code_base: usize,
    show_thoughts: bool,
) -> (Vec<Line<'static>>, usize) {
    let mut lines = Vec::new();
    let mut fences = 0;
    match m.role {
        Role::User => {
            lines.push(name_line("You", theme.user, m, theme));
            // Its pictures and files as chips; a file's contents are not shown.
            let pictures = m.images.iter().map(|c| c.label());
            let chips: Vec<String> = pictures.chain(m.files.iter().map(|f| f.label())).collect();
            if !chips.is_empty() {
                lines.extend(markdown::plain(
                    &chips.join(" "),
                    width,
                    "",
                    "",
                    theme.accent,
                ));
            }
            lines.extend(markdown::plain(&m.text, width, "", "", Default::default()));
        }
        Role::Model => {
            lines.push(name_line("Gemma", theme.model, m, theme));
            let thought = m.thought.trim();
            if !thought.is_empty() {
                if show_thoughts {
                    lines.push(Line::from(Span::styled("▾ thought", theme.dim)));
                    lines.extend(markdown::plain(thought, width, "│ ", "│ ", theme.thought));
                } else {
                    let n = thought.lines().count();
                    let label = format!("▸ thought, {n} line{}", if n == 1 { "" } else { "s" });
                    lines.push(Line::from(Span::styled(label, theme.thought)));
                }
            }
            // An answer that so far only called tools has no empty body line above the calls.
            if !m.text.trim().is_empty() || m.tools.is_empty() {
                let (body, n) = markdown::layout(m.text.trim_start(), width, theme, code_base);
                fences = n;
                lines.extend(body);
            }
            lines.extend(tool_lines(&m.tools, width, theme, m.expanded));
        }
        Role::Notice => lines.extend(markdown::plain(&m.text, width, "· ", "  ", theme.dim)),
        Role::Error => lines.extend(markdown::plain(&m.text, width, "✗ ", "  ", theme.error)),
        Role::System => {
            lines.push(Line::from(Span::styled(
                "System prompt (/system TEXT changes it)",
                theme.dim,
            )));
            lines.extend(markdown::plain(&m.text, width, "│ ", "│ ", theme.thought));
        }
    }
    if let Some(f) = m.footer.as_ref().or(m.live.as_ref()) {
        // Wrapped: a turn with tool calls says more than fits a narrow screen.
        lines.extend(markdown::plain(f, width, "", "", theme.dim));
    }
    lines.push(Line::default());
    (lines, fences)
}

/// A message's name line, with ‹n/m› when its turn has several versions.
fn name_line(
    name: &'static str,
    style: ratatui::style::Style,
    m: &Message,
    theme: &Theme,
) -> Line<'static> {
    let mut spans = vec![Span::styled(name, style)];
    if let Some((n, of)) = m.versions {
        spans.push(Span::styled(format!(" ‹{n}/{of}›"), theme.accent));
    }
    Line::from(spans)
}
