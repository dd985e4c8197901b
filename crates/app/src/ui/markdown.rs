//! Markdown-lite layout: headings, emphasis, lists, quotes, inline code and fenced code, wrapped
//! to a width as styled lines. Fenced code is never wrapped (long lines are cut at the edge), and
//! each fence is numbered so it can be copied by number.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use super::theme::Theme;

/// Lays `text` out in `width` cells; code fences are numbered from `code_base + 1`. Returns the
/// lines and the number of fences.
pub fn layout(
    text: &str,
    width: usize,
    theme: &Theme,
    code_base: usize,
) -> (Vec<Line<'static>>, usize) {
    let width = width.max(8);
    let mut out = Vec::new();
    let mut fences = 0;
    let mut in_code = false;
    for line in text.split('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            if in_code {
                in_code = false;
            } else {
                in_code = true;
                fences += 1;
                let lang = trimmed.trim_start_matches('`').trim();
                let label = format!("┌ [{}] {lang}", code_base + fences);
                out.push(Line::from(Span::styled(
                    label.trim_end().to_string(),
                    theme.dim,
                )));
            }
            continue;
        }
        if in_code {
            out.push(Line::from(vec![
                Span::styled("│ ", theme.dim),
                Span::styled(clip(line, width - 2), theme.code),
            ]));
            continue;
        }
        if trimmed.is_empty() {
            out.push(Line::default());
            continue;
        }
        let indent = line.len() - trimmed.len();
        out.extend(prose(trimmed, &" ".repeat(indent.min(8)), width, theme));
    }
    (out, fences)
}

/// One line of prose (`trimmed`, indented by `pad`) wrapped in `width` cells: a heading, a
/// quote, a list item or a paragraph's line.
fn prose(trimmed: &str, pad: &str, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    if let Some((level, rest)) = heading(trimmed) {
        let style = theme.heading;
        let prefix = if level > 1 {
            "#".repeat(level) + " "
        } else {
            String::new()
        };
        let rest_prefix = " ".repeat(prefix.len());
        wrap(
            &inline(rest, style, theme),
            width,
            &prefix,
            &rest_prefix,
            style,
        )
    } else if let Some(rest) = trimmed.strip_prefix("> ") {
        let first = format!("{pad}│ ");
        let spans = inline(rest, theme.thought, theme);
        wrap(&spans, width, &first, &first, theme.dim)
    } else if let Some((marker, rest)) = list_item(trimmed) {
        let first = format!("{pad}{marker} ");
        let rest_prefix = " ".repeat(first.width());
        let spans = inline(rest, Style::new(), theme);
        wrap(&spans, width, &first, &rest_prefix, theme.accent)
    } else {
        let spans = inline(trimmed, Style::new(), theme);
        wrap(&spans, width, pad, pad, Style::new())
    }
}

/// Plain text wrapped in `width` cells, in `style`, after `first` on its first line and `rest`
/// on every other.
pub fn plain(
    text: &str,
    width: usize,
    first: &str,
    rest: &str,
    style: Style,
) -> Vec<Line<'static>> {
    text.split('\n')
        .enumerate()
        .flat_map(|(i, l)| {
            let lead = if i == 0 { first } else { rest };
            wrap(&[(l.to_string(), style)], width.max(8), lead, rest, style)
        })
        .collect()
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let rest = line[level..].strip_prefix(' ')?;
    (1..=6).contains(&level).then_some((level, rest))
}

fn list_item(line: &str) -> Option<(String, &str)> {
    for m in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(m) {
            return Some(("•".into(), rest));
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0
        && digits < 4
        && let Some(rest) = line[digits..].strip_prefix(". ")
    {
        return Some((format!("{}.", &line[..digits]), rest));
    }
    None
}

/// Splits `text` into styled runs: `**bold**`, `*italic*`, `_italic_` (at a word start), and
/// `` `code` ``. Unclosed markers style the rest, which is what a streaming answer needs.
fn inline(text: &str, base: Style, theme: &Theme) -> Vec<(String, Style)> {
    let mut runs: Vec<(String, Style)> = Vec::new();
    let (mut bold, mut italic, mut code) = (false, false, false);
    let mut cur = String::new();
    let style = |bold: bool, italic: bool, code: bool| {
        if code {
            return theme.inline_code;
        }
        let mut s = base;
        if bold {
            s = s.add_modifier(Modifier::BOLD);
        }
        if italic {
            s = s.add_modifier(Modifier::ITALIC);
        }
        s
    };
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev_space = i == 0 || chars[i - 1].is_whitespace();
        let toggle = if c == '`' {
            Some(2)
        } else if code {
            None
        } else if c == '*' && chars.get(i + 1) == Some(&'*') {
            Some(0)
        } else if c == '*' || (c == '_' && (prev_space || italic)) {
            Some(1)
        } else {
            None
        };
        match toggle {
            Some(kind) => {
                if !cur.is_empty() {
                    runs.push((std::mem::take(&mut cur), style(bold, italic, code)));
                }
                match kind {
                    0 => {
                        bold = !bold;
                        i += 1;
                    }
                    1 => italic = !italic,
                    _ => code = !code,
                }
            }
            None => cur.push(c),
        }
        i += 1;
    }
    if !cur.is_empty() {
        runs.push((cur, style(bold, italic, code)));
    }
    runs
}

/// Greedy word wrap of styled runs into lines of `width` cells, after `first` on the first line
/// and `rest` on the others (both in `prefix_style`). A word wider than a line is broken.
fn wrap(
    runs: &[(String, Style)],
    width: usize,
    first: &str,
    rest: &str,
    prefix_style: Style,
) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let mut spans = vec![Span::styled(first.to_string(), prefix_style)];
    let mut used = first.width();
    // Whether the current line has no content yet.
    let mut empty = true;
    let mut break_line = |spans: &mut Vec<Span<'static>>, used: &mut usize| {
        lines.push(Line::from(std::mem::take(spans)));
        spans.push(Span::styled(rest.to_string(), prefix_style));
        *used = rest.width();
    };
    for (text, style) in runs {
        for word in split_words(text) {
            let mut word = word;
            if !empty && used + word.width() > width {
                break_line(&mut spans, &mut used);
                empty = true;
                word = word.trim_start();
            }
            let mut piece = String::new();
            let mut piece_w = 0;
            for ch in word.chars() {
                let cw = ch.width().unwrap_or(0);
                if used + piece_w + cw > width && (piece_w > 0 || !empty) {
                    if !piece.is_empty() {
                        spans.push(Span::styled(std::mem::take(&mut piece), *style));
                    }
                    break_line(&mut spans, &mut used);
                    piece_w = 0;
                    empty = true;
                }
                piece.push(ch);
                piece_w += cw;
            }
            if !piece.is_empty() {
                used += piece_w;
                spans.push(Span::styled(piece, *style));
                empty = false;
            }
        }
    }
    lines.push(Line::from(spans));
    lines
}

/// Words with their leading whitespace, so that joining them gives the text back.
fn split_words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() && in_word {
            out.push(&text[start..i]);
            start = i;
            in_word = false;
        } else if !c.is_whitespace() {
            in_word = true;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// `text` cut to `width` cells, with `…` when cut.
pub(super) fn clip(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_string();
    }
    let mut out = String::new();
    let mut w = 0;
    for ch in text.chars() {
        let cw = ch.width().unwrap_or(0);
        if w + cw + 1 > width {
            break;
        }
        out.push(ch);
        w += cw;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line]) -> Vec<String> {
        lines
            .iter()
            .map(|l| {
                l.spans
                    .iter()
                    .map(|s| s.content.as_ref())
                    .collect::<String>()
            })
            .collect()
    }

    #[test]
    fn paragraphs_wrap_on_words_and_code_is_cut_not_wrapped() {
        let t = Theme::dark();
        let (lines, fences) = layout(
            "Hello **bold** world, this wraps.\n```rust\nfn main() { println!(\"a long line\"); }\n```\n- item one two three",
            16,
            &t,
            2,
        );
        assert_eq!(fences, 1);
        assert_eq!(
            text(&lines),
            vec![
                "Hello bold",
                "world, this",
                "wraps.",
                "┌ [3] rust",
                "│ fn main() { p…",
                "• item one two",
                "  three",
            ]
        );
        assert!(
            lines[0]
                .spans
                .iter()
                .any(|s| s.content == "bold" && s.style.add_modifier.contains(Modifier::BOLD))
        );
    }

    #[test]
    fn long_words_break() {
        let t = Theme::dark();
        let (lines, _) = layout("abcdefghijklmnopqrstuvwxyz", 10, &t, 0);
        assert_eq!(text(&lines), vec!["abcdefghij", "klmnopqrst", "uvwxyz"]);
    }
}
