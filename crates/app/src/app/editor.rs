//! The multi-line input: text as lines, a cursor in (line, char) coordinates, and the edits the
//! keys make. Layout on screen (wrapping, the cursor's cell) is [`Editor::layout`].

use unicode_width::UnicodeWidthChar;

/// The input being typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Editor {
    lines: Vec<String>,
    /// Line index.
    row: usize,
    /// Char index within the line.
    col: usize,
}

impl Default for Editor {
    fn default() -> Self {
        Self {
            lines: vec![String::new()],
            row: 0,
            col: 0,
        }
    }
}

impl Editor {
    /// The whole text, lines joined by `\n`.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// Whether nothing is typed.
    pub fn is_empty(&self) -> bool {
        self.lines.len() == 1 && self.lines[0].is_empty()
    }

    /// Replaces the text; the cursor goes to the end.
    pub fn set(&mut self, text: &str) {
        self.lines = text.split('\n').map(String::from).collect();
        self.row = self.lines.len() - 1;
        self.col = self.lines[self.row].chars().count();
    }

    /// Takes the text out, leaving the editor empty.
    pub fn take(&mut self) -> String {
        let t = self.text();
        *self = Self::default();
        t
    }

    fn byte(&self, col: usize) -> usize {
        let line = &self.lines[self.row];
        line.char_indices().nth(col).map_or(line.len(), |(i, _)| i)
    }

    fn line_chars(&self) -> usize {
        self.lines[self.row].chars().count()
    }

    /// Types `text` at the cursor: `\n`, `\r\n` and a lone `\r` (what tmux sends for a pasted
    /// newline) split lines, a tab is a space, other control characters are dropped. In one pass
    /// over the text, whatever its length (a paste of a megabyte is one insert).
    pub fn insert(&mut self, text: &str) {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| if c == '\t' { ' ' } else { c })
                .filter(|c| !c.is_control())
                .collect()
        };
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        let mut parts = text.split('\n').map(clean);
        let first = parts.next().unwrap_or_default();
        let at = self.byte(self.col);
        let tail = self.lines[self.row].split_off(at);
        self.col += first.chars().count();
        self.lines[self.row].push_str(&first);
        let more: Vec<String> = parts.collect();
        if let Some(last) = more.last() {
            self.col = last.chars().count();
            let n = more.len();
            self.lines.splice(self.row + 1..self.row + 1, more);
            self.row += n;
        }
        self.lines[self.row].push_str(&tail);
    }

    /// Splits the line at the cursor.
    pub fn newline(&mut self) {
        let at = self.byte(self.col);
        let rest = self.lines[self.row].split_off(at);
        self.lines.insert(self.row + 1, rest);
        self.row += 1;
        self.col = 0;
    }

    /// Deletes the character before the cursor, joining lines at a line start.
    pub fn backspace(&mut self) {
        if self.col > 0 {
            self.col -= 1;
            let at = self.byte(self.col);
            self.lines[self.row].remove(at);
        } else if self.row > 0 {
            let line = self.lines.remove(self.row);
            self.row -= 1;
            self.col = self.line_chars();
            self.lines[self.row].push_str(&line);
        }
    }

    /// Deletes the character under the cursor, joining lines at a line end.
    pub fn delete(&mut self) {
        if self.col < self.line_chars() {
            let at = self.byte(self.col);
            self.lines[self.row].remove(at);
        } else if self.row + 1 < self.lines.len() {
            let next = self.lines.remove(self.row + 1);
            self.lines[self.row].push_str(&next);
        }
    }

    /// Moves left, to the previous line's end at a line start.
    pub fn left(&mut self) {
        if self.col > 0 {
            self.col -= 1;
        } else if self.row > 0 {
            self.row -= 1;
            self.col = self.line_chars();
        }
    }

    /// Moves right, to the next line's start at a line end.
    pub fn right(&mut self) {
        if self.col < self.line_chars() {
            self.col += 1;
        } else if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = 0;
        }
    }

    /// Moves up a line; false on the first line (the caller may recall history).
    pub fn up(&mut self) -> bool {
        if self.row == 0 {
            return false;
        }
        self.row -= 1;
        self.col = self.col.min(self.line_chars());
        true
    }

    /// Moves down a line; false on the last line.
    pub fn down(&mut self) -> bool {
        if self.row + 1 >= self.lines.len() {
            return false;
        }
        self.row += 1;
        self.col = self.col.min(self.line_chars());
        true
    }

    /// To the line start.
    pub fn home(&mut self) {
        self.col = 0;
    }

    /// To the line end.
    pub fn end(&mut self) {
        self.col = self.line_chars();
    }

    /// Deletes from the line start to the cursor.
    pub fn kill_to_start(&mut self) {
        let at = self.byte(self.col);
        self.lines[self.row].replace_range(..at, "");
        self.col = 0;
    }

    /// Wraps the text into rows of at most `width` cells; returns the rows and the cursor's
    /// (x, y) cell.
    pub fn layout(&self, width: usize) -> (Vec<String>, (usize, usize)) {
        let width = width.max(2);
        let mut rows = Vec::new();
        let mut cursor = (0, 0);
        for (r, line) in self.lines.iter().enumerate() {
            let mut row = String::new();
            let mut w = 0;
            for (c, ch) in line.chars().enumerate() {
                let cw = ch.width().unwrap_or(0);
                if w + cw > width {
                    rows.push(std::mem::take(&mut row));
                    w = 0;
                }
                if r == self.row && c == self.col {
                    cursor = (w, rows.len());
                }
                row.push(ch);
                w += cw;
            }
            if r == self.row && self.col >= line.chars().count() {
                if w >= width {
                    rows.push(std::mem::take(&mut row));
                    w = 0;
                }
                cursor = (w, rows.len());
            }
            rows.push(row);
        }
        (rows, cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typing_newlines_and_deleting() {
        let mut e = Editor::default();
        e.insert("héllo\nworld");
        assert_eq!(e.text(), "héllo\nworld");
        e.home();
        e.backspace();
        assert_eq!(e.text(), "hélloworld");
        e.left();
        e.left();
        e.newline();
        assert_eq!(e.text(), "hél\nloworld");
        assert!(e.up());
        assert!(!e.up());
        e.end();
        e.delete();
        assert_eq!(e.text(), "héllo world".replace(' ', ""));
        assert_eq!(e.take(), "hélloworld");
        assert!(e.is_empty());
    }

    #[test]
    fn layout_wraps_and_places_the_cursor() {
        let mut e = Editor::default();
        e.insert("abcdefg\nxy");
        let (rows, cursor) = e.layout(3);
        assert_eq!(rows, vec!["abc", "def", "g", "xy"]);
        assert_eq!(cursor, (2, 3));
        e.set("abc");
        assert_eq!(
            e.layout(3),
            (vec!["abc".to_string(), String::new()], (0, 1))
        );
    }

    /// A paste inserts at the cursor with its line breaks whatever the terminal sends for them
    /// (LF, CRLF, or CR as tmux does), and a large paste arrives whole.
    #[test]
    fn pastes_keep_their_line_breaks_and_arrive_whole() {
        let mut e = Editor::default();
        e.insert("ab");
        e.left();
        e.insert("1\r2\r\n3\n4\t5\u{1b}");
        assert_eq!(e.text(), "a1\n2\n3\n4 5b");
        assert_eq!((e.row, e.col), (3, 3));
        let big: String = "0123456789abcdef\r".repeat(1 << 16);
        let mut e = Editor::default();
        e.insert(&big);
        assert_eq!(e.lines.len(), (1 << 16) + 1);
        assert_eq!(e.text().len(), big.len());
    }
}
