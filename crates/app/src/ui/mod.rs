//! Drawing: a pure function of the [`App`] (with [`view::View`], the renderer's cache of laid-out
//! transcripts). The screen is a tab bar, the transcript, the input box (or the approval pane
//! while a tool call waits) and a status line, with popups (help, confirm close, rename) on top.
//! Nothing here changes the app; what it measures (the transcript's length) is handed back
//! through [`App::measured`].

pub mod approval;
mod help;
pub mod markdown;
pub mod message;
pub mod theme;
pub mod tool_lines;
pub mod transcript;
pub mod view;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use unicode_width::UnicodeWidthStr;

use self::theme::Theme;
use self::view::View;
use crate::app::search::{MAX_HITS, SearchState};
use crate::app::tab::Role;
use crate::app::{App, Measured, Overlay};
use crate::config::thinking::grouped;
use crate::config::{Thinking, ThinkingPolicy};
use gemma_protocol::Tier;

/// Where each part of the screen goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    /// The tab bar.
    pub tabs: Rect,
    /// The transcript.
    pub transcript: Rect,
    /// The input box, borders included.
    pub input: Rect,
    /// The status line.
    pub status: Rect,
}

/// The layout for the app's terminal size (the input's height is the app's:
/// [`App::input_height`]).
pub fn areas(app: &App) -> Areas {
    let (w, h) = app.size;
    let [tabs, transcript, input, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(app.input_height()),
        Constraint::Length(1),
    ])
    .areas(Rect::new(0, 0, w, h));
    Areas {
        tabs,
        transcript,
        input,
        status,
    }
}

/// Draws the whole app; `view` keeps the laid-out transcripts between frames. Returns what
/// [`App::measured`] takes: the shown tab, its transcript's length in lines, where a found or
/// selected message put the view, and the line each message starts at.
pub fn render(f: &mut Frame, app: &App, view: &mut View) -> Option<Measured> {
    let theme = &Theme::named(app.theme);
    let a = areas(app);
    view.retain(|id| app.tabs.iter().any(|t| t.id == id));
    tab_bar(f, a.tabs, app);
    let measured = transcript::render(f, a.transcript, app, view);
    input(f, a.input, app);
    status(f, a.status, app);
    match &app.overlay {
        Overlay::None => {}
        Overlay::Help => help::help(f, app),
        Overlay::ConfirmClose(id) => {
            let name = app
                .tabs
                .iter()
                .find(|t| t.id == *id)
                .map_or(String::new(), |t| t.title.clone());
            let text = format!("“{name}” is generating. Close it? (y/n)");
            popup(f, app, " Close tab ", vec![Line::from(text)], 50, 3);
        }
        Overlay::Settings(e) => {
            let mut lines = Vec::new();
            let preset = app.tab().and_then(|t| t.preset.clone());
            lines.push(Line::from(Span::styled(
                match &preset {
                    Some(p) => format!(" preset {p} (/preset NAME changes it)"),
                    None => " no preset (/preset NAME takes one)".to_string(),
                },
                theme.dim,
            )));
            for (i, (name, value, source)) in app.settings_rows(e).into_iter().enumerate() {
                let style = if i == e.field {
                    theme.tab_active
                } else {
                    Default::default()
                };
                lines.push(Line::from(vec![
                    Span::styled(format!(" {name:<12} {value:>6} "), style),
                    Span::styled(format!(" from {}", source.as_str()), theme.dim),
                ]));
            }
            let budget = app.tab().map_or(0, |t| t.image_tokens);
            lines.push(Line::from(Span::styled(
                format!(" pictures up to {budget} tokens (/image-tokens N)"),
                theme.dim,
            )));
            lines.push(Line::default());
            lines.push(Line::from(Span::styled(
                " ←/→ change · r inherit · Enter apply · Esc cancel",
                theme.dim,
            )));
            popup(f, app, " This tab's sampling ", lines, 54, 9);
        }
        Overlay::Search(s) => search_popup(f, app, s),
        Overlay::Rename(e) => {
            let line = Line::from(vec![Span::raw(e.text()), Span::styled("▏", theme.accent)]);
            popup(
                f,
                app,
                " Rename tab (Enter saves, Esc cancels) ",
                vec![line],
                50,
                3,
            );
        }
    }
    measured.map(|(lines, focus_top, starts)| Measured {
        tab: app.tab().map_or(0, |t| t.id),
        lines,
        focus_top,
        starts,
    })
}

fn tab_bar(f: &mut Frame, area: Rect, app: &App) {
    let theme = &Theme::named(app.theme);
    let mut spans = Vec::new();
    for (i, t) in app.tabs.iter().enumerate() {
        // ⚠ a tool call waits for the user, ◆ generating, ✗ failed, then where the session
        // lives: ● warm, ◐ in RAM, ○ cold.
        let mark = if t.waiting_call().is_some() {
            "⚠"
        } else if t.phase.busy() {
            "◆"
        } else if t.failed {
            "✗"
        } else {
            match t.tier {
                Tier::Device => "●",
                Tier::Host => "◐",
                Tier::Cold => "○",
            }
        };
        let label = format!(" {} {} {mark} ", i + 1, t.title);
        let style = if i == app.active {
            theme.tab_active
        } else {
            theme.dim
        };
        spans.push(Span::styled(label, style));
        spans.push(Span::raw(" "));
    }
    // Too many tabs for the width: leave out tabs on the left until the active one shows, with
    // `‹` saying some are hidden.
    let width = |spans: &[Span]| spans.iter().map(|s| s.content.width()).sum::<usize>();
    let active_end = 2 * app.active + 2;
    let mut first = 0;
    while first < app.active
        && width(&spans[2 * first..active_end.min(spans.len())]) + 2 > area.width as usize
    {
        first += 1;
    }
    let mut shown: Vec<Span> = Vec::new();
    if first > 0 {
        shown.push(Span::styled("‹ ", theme.dim));
    }
    shown.extend(spans.drain(2 * first..));
    f.render_widget(Paragraph::new(Line::from(shown)), area);
}

fn input(f: &mut Frame, area: Rect, app: &App) {
    if approval::render(f, area, app) {
        return;
    }
    let theme = &Theme::named(app.theme);
    let Some(t) = app.tab() else { return };
    let inner_w = area.width.saturating_sub(2) as usize;
    let (rows, (cx, cy)) = t.editor.layout(inner_w);
    let chips = usize::from(!t.attachments.is_empty() || !t.files.is_empty());
    let visible = (area.height.saturating_sub(2) as usize).saturating_sub(chips);
    let first = (cy + 1).saturating_sub(visible);
    let mut lines: Vec<Line> = Vec::with_capacity(visible + chips);
    if chips > 0 {
        let labels = t.chip_labels();
        let mut shown = labels.join(" ");
        if shown.width() > inner_w {
            shown = format!(
                "{} attached · ~{} tok (/detach removes them)",
                labels.len(),
                t.pending_tokens()
            );
        }
        lines.push(Line::from(Span::styled(shown, theme.accent)));
    }
    lines.extend(
        rows.iter()
            .skip(first)
            .take(visible)
            .map(|r| Line::from(r.clone())),
    );
    let mut title = match t.editing {
        Some(_) => " Editing: Enter sends a new version, Esc cancels ".to_string(),
        None => " Message ".to_string(),
    };
    match t.choices.thinking {
        Thinking::Off => {}
        Thinking::Tokens(n) => title.push_str(&format!("· thinking {} ", grouped(n))),
        level => title.push_str(&format!("· thinking {} ", level.name())),
    }
    let hint = " Enter send · Alt+Enter newline · Esc stop ";
    let mut block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme.dim)
        .title(Span::styled(title, theme.accent));
    if area.width as usize >= hint.width() + 4 {
        block = block.title_bottom(Line::from(Span::styled(hint, theme.dim)).right_aligned());
    }
    f.render_widget(Paragraph::new(lines).block(block), area);
    if matches!(app.overlay, Overlay::None) {
        let x = area.x + 1 + cx as u16;
        let y = area.y + 1 + (chips + cy - first) as u16;
        if x < area.right() && y < area.bottom() {
            f.set_cursor_position((x, y));
        }
    }
}

fn status(f: &mut Frame, area: Rect, app: &App) {
    let theme = &Theme::named(app.theme);
    let mut spans = vec![Span::styled(
        format!(" {} · {} ", app.model.name, app.model.backend),
        theme.status.add_modifier(Modifier::BOLD),
    )];
    if app.model.template_fallback {
        spans.push(Span::styled(" ⚠ built-in chat layout ", theme.warn));
    }
    spans.push(Span::styled(
        format!(" {} ", app.phase_text()),
        theme.status,
    ));
    if let Some(t) = app.tab() {
        let limit = t.choices.context.unwrap_or(app.model.context_limit).max(1);
        // What waits to be sent counts too, estimated (`~`) until the engine counts it.
        let pending = t.pending_tokens();
        let pct = (t.context_used + pending) * 100 / limit;
        let mut ctx = match pending {
            0 => format!(" ctx {}/{limit} ({pct}%) ", t.context_used),
            n => format!(" ctx {} + ~{n}/{limit} ({pct}%) ", t.context_used),
        };
        if let Some(share) = thought_share(app, t, limit) {
            ctx.push_str(&format!("· thought {share}% "));
        }
        let style = if pct >= 95 {
            theme.error
        } else if pct >= 80 {
            theme.warn
        } else {
            theme.status
        };
        spans.push(Span::styled(ctx, style));
        if pct >= 80 {
            let warn = if pct >= 95 {
                " context almost full: open a new tab (Ctrl+T) "
            } else {
                " context 80% used "
            };
            spans.push(Span::styled(warn, style));
        }
        let r = app.tab_sampling(t);
        spans.push(Span::styled(
            format!(
                " temp {:.2} ({}) ",
                r.params.temperature,
                r.sources[0].as_str()
            ),
            theme.status,
        ));
        if let Some(s) = &t.last_stats {
            spans.push(Span::styled(
                format!(
                    " reused {}/prefilled {} ",
                    s.reused_tokens, s.prefilled_tokens
                ),
                theme.status,
            ));
            if let Some(spec) = s.speculation {
                spans.push(Span::styled(format!(" {} ", spec.summary()), theme.status));
            }
        }
    }
    if let Some(rec) = app.recording_text() {
        spans.push(Span::styled(format!(" {rec} "), theme.error));
    }
    if let Some(note) = &app.flash {
        spans.push(Span::styled(format!(" {note} "), theme.accent));
    } else if let Some(e) = &app.last_error {
        spans.push(Span::styled(format!(" error: {e} "), theme.error));
    }
    f.render_widget(Paragraph::new(Line::from(spans)).style(theme.status), area);
}

/// The share of the context the tab's thought holds, in percent: the running turn's, and after
/// it the last turn's where thoughts are kept (`sessions.thinking_policy = "keep"`).
fn thought_share(app: &App, t: &crate::app::tab::Tab, limit: usize) -> Option<usize> {
    let keep = app
        .config
        .as_ref()
        .is_some_and(|c| c.sessions.thinking_policy == ThinkingPolicy::Keep);
    (t.thought_tokens > 0 && (t.phase.busy() || keep)).then(|| t.thought_tokens * 100 / limit)
}

/// A bordered box centred on the screen, at most `w` x `h`.
pub(crate) fn popup(f: &mut Frame, app: &App, title: &str, lines: Vec<Line>, w: u16, h: u16) {
    let theme = &Theme::named(app.theme);
    let (sw, sh) = app.size;
    let w = w.min(sw);
    let h = h.min(sh);
    let area = Rect::new((sw - w) / 2, (sh - h) / 2, w, h);
    f.render_widget(Clear, area);
    let block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme.accent)
        .title(title.to_string());
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// The search overlay: the query, the hits (the selected one marked) and a footer.
fn search_popup(f: &mut Frame, app: &App, s: &SearchState) {
    let theme = &Theme::named(app.theme);
    let (sw, sh) = app.size;
    let w = sw.saturating_sub(8).clamp(20, 100);
    let h = sh.saturating_sub(4).clamp(6, 24);
    let mut lines = vec![Line::from(vec![
        Span::raw(format!(" {}", s.query.text())),
        Span::styled("▏", theme.accent),
    ])];
    let room = (h as usize).saturating_sub(4);
    let first = s.selected.saturating_sub(room.saturating_sub(1));
    for (i, hit) in s.hits.iter().enumerate().skip(first).take(room) {
        let who = match hit.role {
            Role::User => "You",
            Role::Model => "Gemma",
            _ => "System",
        };
        let style = if i == s.selected {
            theme.tab_active
        } else {
            Default::default()
        };
        lines.push(Line::from(vec![
            Span::styled(
                match &hit.closed {
                    Some(_) => format!(" {} (closed) · {who}: ", hit.title),
                    None => format!(" {} · {who}: ", hit.title),
                },
                theme.dim,
            ),
            Span::styled(hit.snippet.clone(), style),
        ]));
    }
    let found = match s.hits.len() {
        0 if s.query.text().trim().is_empty() => "type to search every chat".to_string(),
        0 => "nothing found".to_string(),
        n if n >= MAX_HITS => format!("the first {n} found"),
        n => format!("{n} found"),
    };
    while lines.len() < room + 1 {
        lines.push(Line::default());
    }
    lines.push(Line::from(Span::styled(
        format!(" {found} · ↑/↓ pick · Enter open · Esc close"),
        theme.dim,
    )));
    popup(f, app, " Search ", lines, w, h);
}
