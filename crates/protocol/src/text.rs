//! What of a model's, a server's or a file's text may reach a terminal: no control characters
//! (escape sequences, bell, carriage return, backspace, C1 codes) and no bidirectional
//! overrides or isolates (which reorder what is shown, "Trojan Source"); newline and tab stay
//! where the layout keeps them. Every front end shows untrusted text through these.

use std::borrow::Cow;

/// Whether `c` may not reach a terminal as it is: a control character other than newline and
/// tab, or a bidirectional formatting character.
pub fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` without what [`is_unsafe`] refuses (borrowed when there is nothing to drop).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.contains(is_unsafe) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().filter(|&c| !is_unsafe(c)).collect())
}

/// `text` as one line: [`printable`], with each newline and tab a space (titles, names).
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.contains(|c: char| is_unsafe(c) || c == '\n' || c == '\t') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .filter(|&c| !is_unsafe(c))
            .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
            .collect(),
    )
}

/// At most `most` characters of `text` as [`one_line`], with `…` where it was cut (names and
/// titles in messages).
pub fn short(text: &str, most: usize) -> String {
    let line = one_line(text);
    let mut out: String = line.chars().take(most).collect();
    if line.chars().nth(most).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_bidi_controls_are_dropped_layout_kept() {
        let evil = "a\u{1b}]0;title\u{7}b\u{1b}[2Jc\r\nd\te\u{9b}f\u{202E}g\u{2066}h\u{200F}";
        assert_eq!(printable(evil), "a]0;titleb[2Jc\nd\tefgh");
        assert_eq!(one_line(evil), "a]0;titleb[2Jc d efgh");
        assert!(matches!(printable("plain\ntext é 😀"), Cow::Borrowed(_)));
        assert!(matches!(one_line("plain text"), Cow::Borrowed(_)));
        assert_eq!(short("a\nb\u{1b}c", 4), "a bc");
        assert_eq!(short("abcdef", 3), "abc…");
    }
}
