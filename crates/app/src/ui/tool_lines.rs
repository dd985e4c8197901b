//! An answer's tool calls as lines under it: collapsed, one line each
//! (`▸ tool NAME(args…) → 1.2 kB`, the arguments clipped to the width); expanded (Enter on the
//! selected answer), the arguments pretty-printed and the result, each in a bar. Everything a
//! model or a server wrote is cleaned of terminal controls here.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

use super::markdown;
use super::theme::Theme;
use crate::app::tools::{RunState, ToolRun, human_bytes, pretty_arguments};
use gemma_protocol::text::{one_line, printable};

/// Most lines of a result shown expanded (the export has it whole).
const MAX_RESULT_LINES: usize = 200;

/// The lines of `runs` at `width`, collapsed or `expanded`.
pub fn tool_lines(
    runs: &[ToolRun],
    width: usize,
    theme: &Theme,
    expanded: bool,
) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for r in runs {
        if expanded {
            lines.extend(expanded_lines(r, width, theme));
        } else {
            lines.push(collapsed(r, width, theme));
        }
    }
    lines
}

/// The style of what became of a call.
fn outcome_style(r: &ToolRun, theme: &Theme) -> Style {
    match r.state {
        RunState::Done => theme.dim,
        RunState::Waiting | RunState::Running => theme.accent,
        RunState::Failed => theme.error,
        RunState::Denied | RunState::Stopped => theme.warn,
    }
}

/// `▸ tool NAME(args…) → outcome`, the arguments clipped so that the line fits `width`.
pub fn collapsed(r: &ToolRun, width: usize, theme: &Theme) -> Line<'static> {
    let name = one_line(&r.name).into_owned();
    let outcome = format!(") → {}", r.outcome());
    let fixed = "▸ tool ".width() + name.width() + 1 + outcome.width();
    let room = width.saturating_sub(fixed).max(8);
    let args = one_line(&r.arguments);
    let args = markdown::clip(args.trim(), room);
    Line::from(vec![
        Span::styled("▸ tool ", theme.dim),
        Span::styled(format!("{name}("), theme.accent),
        Span::styled(args, theme.dim),
        Span::styled(")", theme.accent),
        Span::styled(outcome[1..].to_string(), outcome_style(r, theme)),
    ])
}

/// A call with its arguments and result in full.
fn expanded_lines(r: &ToolRun, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let mut head = vec![
        Span::styled("▾ tool ", theme.dim),
        Span::styled(one_line(&r.name).into_owned(), theme.accent),
        Span::styled(format!(" of {} → ", one_line(&r.server)), theme.dim),
        Span::styled(r.outcome(), outcome_style(r, theme)),
    ];
    if !r.state.open() && r.seconds > 0.0 {
        head.push(Span::styled(format!(" in {:.1} s", r.seconds), theme.dim));
    }
    let mut lines = vec![Line::from(head)];
    lines.push(Line::from(Span::styled("  arguments", theme.dim)));
    lines.extend(markdown::plain(
        &pretty_arguments(&r.arguments),
        width,
        "  │ ",
        "  │ ",
        theme.thought,
    ));
    if r.state.open() {
        return lines;
    }
    let label = match r.state {
        RunState::Done => format!("  result, {}", human_bytes(r.bytes)),
        _ => "  what the model was told".to_string(),
    };
    lines.push(Line::from(Span::styled(label, theme.dim)));
    let text = printable(r.result.trim_end());
    let all: Vec<&str> = text.split('\n').collect();
    let shown = all.len().min(MAX_RESULT_LINES);
    lines.extend(markdown::plain(
        &all[..shown].join("\n"),
        width,
        "  │ ",
        "  │ ",
        theme.thought,
    ));
    if all.len() > shown {
        lines.push(Line::from(Span::styled(
            format!(
                "  … {} more lines (/export has them all)",
                all.len() - shown
            ),
            theme.dim,
        )));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemma_protocol::{ToolCall, ToolOutcome};

    fn text(l: &Line) -> String {
        l.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    fn run() -> ToolRun {
        let call = ToolCall {
            id: 1,
            name: "search".into(),
            server: "web".into(),
            arguments: r#"{"query":"rust \u001b[31mtui","limit":10}"#.into(),
            ..Default::default()
        };
        ToolRun::new(&call, false)
    }

    #[test]
    fn a_collapsed_call_fits_its_line_and_says_what_came_back() {
        let theme = Theme::dark();
        let mut r = run();
        r.finish(&ToolOutcome {
            id: 1,
            name: "search".into(),
            ok: true,
            text: "results".into(),
            bytes: 1234,
            seconds: 0.5,
            ..Default::default()
        });
        let line = text(&collapsed(&r, 40, &theme));
        assert_eq!(line, "▸ tool search({\"query\":\"rust …) → 1.2 kB");
        assert!(line.width() <= 40, "{line}");
        let wide = text(&collapsed(&r, 120, &theme));
        assert!(wide.ends_with(r#""limit":10}) → 1.2 kB"#), "{wide}");
        r.state = RunState::Denied;
        assert!(text(&collapsed(&r, 60, &theme)).ends_with("→ denied"));
    }

    #[test]
    fn an_expanded_call_shows_arguments_and_result_cleaned() {
        let theme = Theme::dark();
        let mut r = run();
        r.finish(&ToolOutcome {
            id: 1,
            name: "search".into(),
            ok: false,
            text: "server \u{1b}]0;evil\u{7}crashed".into(),
            bytes: 0,
            seconds: 1.25,
            ..Default::default()
        });
        let lines: Vec<String> = tool_lines(&[r], 60, &theme, true)
            .iter()
            .map(text)
            .collect();
        assert_eq!(
            lines,
            [
                "▾ tool search of web → failed: server ]0;evilcrashed in 1.2 s",
                "  arguments",
                "  │ {",
                "  │   \"query\": \"rust \\u001b[31mtui\",",
                "  │   \"limit\": 10",
                "  │ }",
                "  what the model was told",
                "  │ server ]0;evilcrashed",
            ]
        );
    }
}
