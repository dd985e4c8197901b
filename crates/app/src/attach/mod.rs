//! Text files sent with a message: each as a fenced block headed by its name (the fence's
//! language from the extension), before the typed text. [`compose`] is the one place a user
//! turn's text is made from its files and what was typed, for the turn sent, for the history the
//! engine rebuilds (which must match it byte for byte) and for headless runs. Reading and
//! refusing files is [`read`]'s; nothing here touches the terminal.

pub mod read;

pub use read::{AttachError, MAX_FILES, expand, expand_home, read_text, split_args};

/// `ui.attach_max_kb`'s default: the largest text file attached, in KiB.
pub const DEFAULT_MAX_KB: u64 = 256;

/// A text file attached to a message: its name as shown and sent, and its contents when it was
/// attached (kept with the chat, so that the message reads the same after the file changes).
/// Fixed once made, so that its token estimate is worked out once (the input's chips and meter
/// read it every frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFile {
    /// The path as given or matched (`~/…` for the home directory), one line.
    name: String,
    /// The contents, exactly.
    text: String,
    /// Tokens its block takes, estimated.
    tokens: usize,
}

impl TextFile {
    /// The file `name` with contents `text`.
    pub fn new(name: String, text: String) -> Self {
        let mut f = Self {
            name,
            text,
            tokens: 0,
        };
        f.tokens = estimate_tokens(&f.block());
        f
    }

    /// Its name as shown and sent.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its contents.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The last part of its name (`main.rs` for `src/main.rs`).
    pub fn file_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }

    /// The file as the model reads it: `File: NAME`, then the contents (without their last
    /// newline) in a fence longer than any run of backticks in them.
    pub fn block(&self) -> String {
        let body = self.text.strip_suffix('\n').unwrap_or(&self.text);
        let body = body.strip_suffix('\r').unwrap_or(body);
        let fence = fence(body);
        let lang = language(&self.name).unwrap_or("");
        if body.is_empty() {
            format!("File: {}\n{fence}{lang}\n{fence}", self.name)
        } else {
            format!("File: {}\n{fence}{lang}\n{body}\n{fence}", self.name)
        }
    }

    /// Tokens its block takes, estimated: see [`estimate_tokens`].
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// `[file main.rs · 3.4 kB · ~870 tok]`, safe for a terminal.
    pub fn label(&self) -> String {
        let name = gemma_protocol::text::one_line(self.file_name()).into_owned();
        format!(
            "[file {name} · {} · ~{} tok]",
            crate::chats::fmt::human_bytes(self.text.len()),
            self.tokens()
        )
    }
}

/// A user turn's text: each file's block in order, then the typed text, separated by blank
/// lines. Without files it is the typed text as it is.
pub fn compose(files: &[TextFile], typed: &str) -> String {
    if files.is_empty() {
        return typed.to_string();
    }
    let mut parts: Vec<String> = files.iter().map(TextFile::block).collect();
    if !typed.trim().is_empty() {
        parts.push(typed.to_string());
    }
    parts.join("\n\n")
}

/// Whether a path names a picture (by its extension): `/attach` and `--attach` send those as
/// pictures, anything else as text.
pub fn looks_like_picture(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".webp", ".gif"]
        .iter()
        .any(|e| lower.ends_with(e))
}

/// Whether a path names a recording (by its extension): `/attach` and `--attach` send those to
/// the audio tower.
pub fn looks_like_audio(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    [".wav", ".flac", ".mp3", ".ogg", ".oga"]
        .iter()
        .any(|e| lower.ends_with(e))
}

/// Tokens `text` takes, estimated without the model's tokenizer (the app has none): one per
/// four ASCII bytes, rounded up, plus one per other character (Gemma's vocabulary splits
/// English and code at about four bytes a token; other scripts take about a token a letter).
/// The engine's count after the turn is exact.
pub fn estimate_tokens(text: &str) -> usize {
    let ascii = text.bytes().filter(u8::is_ascii).count();
    let other = text.chars().filter(|c| !c.is_ascii()).count();
    ascii.div_ceil(4) + other
}

/// A code fence longer than any run of backticks in `text`, three at least.
pub fn fence(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

/// The fence language for a file named `name`, from its extension (or its whole name, for
/// `Makefile` and the like); `None` for plain text and what the table does not know.
pub fn language(name: &str) -> Option<&'static str> {
    let file = name.rsplit('/').next().unwrap_or(name);
    match file {
        "Makefile" | "makefile" | "GNUmakefile" => return Some("make"),
        "Dockerfile" | "Containerfile" => return Some("dockerfile"),
        "CMakeLists.txt" => return Some("cmake"),
        _ => {}
    }
    let ext = file.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "rs" => "rust",
        "py" | "pyi" => "python",
        "md" | "markdown" => "markdown",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "jsx",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "tsx",
        "json" => "json",
        "toml" => "toml",
        "yaml" | "yml" => "yaml",
        "c" => "c",
        "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "cs" => "csharp",
        "go" => "go",
        "java" => "java",
        "kt" | "kts" => "kotlin",
        "swift" => "swift",
        "rb" => "ruby",
        "php" => "php",
        "lua" => "lua",
        "sh" | "bash" | "zsh" => "sh",
        "fish" => "fish",
        "ps1" => "powershell",
        "html" | "htm" => "html",
        "css" => "css",
        "scss" => "scss",
        "sql" => "sql",
        "xml" => "xml",
        "svg" => "svg",
        "ini" | "cfg" => "ini",
        "csv" => "csv",
        "diff" | "patch" => "diff",
        "tex" => "latex",
        "r" => "r",
        "hs" => "haskell",
        "ml" | "mli" => "ocaml",
        "ex" | "exs" => "elixir",
        "erl" => "erlang",
        "zig" => "zig",
        "nix" => "nix",
        "proto" => "protobuf",
        "dart" => "dart",
        "scala" => "scala",
        "jl" => "julia",
        "vue" => "vue",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> TextFile {
        TextFile::new(name.into(), text.into())
    }

    #[test]
    fn the_language_comes_from_the_extension_or_the_name() {
        assert_eq!(language("src/main.rs"), Some("rust"));
        assert_eq!(language("a.PY"), Some("python"));
        assert_eq!(language("notes.md"), Some("markdown"));
        assert_eq!(language("x/y.hpp"), Some("cpp"));
        assert_eq!(language("build/Makefile"), Some("make"));
        assert_eq!(language("notes.txt"), None);
        assert_eq!(language("README"), None);
        assert_eq!(language("archive.tar.unknown"), None);
    }

    #[test]
    fn the_fence_outgrows_the_backticks_inside() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("a `b` c"), "```");
        assert_eq!(fence("```rust\nfn x() {}\n```"), "````");
        assert_eq!(fence("`````"), "``````");
    }

    #[test]
    fn a_block_is_headed_by_its_name_and_keeps_the_contents() {
        let f = file("src/lib.rs", "fn a() {}\r\nfn b() {}\n");
        assert_eq!(
            f.block(),
            "File: src/lib.rs\n```rust\nfn a() {}\r\nfn b() {}\n```"
        );
        let md = file("doc.md", "```sh\nls\n```\n");
        assert_eq!(
            md.block(),
            "File: doc.md\n````markdown\n```sh\nls\n```\n````"
        );
        assert_eq!(file("e.txt", "").block(), "File: e.txt\n```\n```");
        // Only the last newline goes.
        assert_eq!(file("t", "a\n\n").block(), "File: t\n```\na\n\n```");
    }

    #[test]
    fn files_go_before_the_typed_text() {
        let files = [file("a.rs", "A"), file("b.toml", "B\n")];
        assert_eq!(
            compose(&files, "Explain"),
            "File: a.rs\n```rust\nA\n```\n\nFile: b.toml\n```toml\nB\n```\n\nExplain"
        );
        assert_eq!(compose(&files[..1], ""), "File: a.rs\n```rust\nA\n```");
        assert_eq!(compose(&[], "hi \n"), "hi \n");
    }

    #[test]
    fn the_estimate_counts_four_ascii_bytes_a_token_and_a_token_a_letter_else() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("日本語"), 3);
        // The block: 14 bytes of header, 8 of opening fence, 3,400 of contents, 4 of closing
        // fence; 3,426 / 4 rounded up.
        let f = file("main.rs", &"x".repeat(3400));
        assert_eq!(f.label(), "[file main.rs · 3.4 kB · ~857 tok]");
    }
}
