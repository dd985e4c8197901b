//! Small text forms the chat code shares (sizes, short names): a leaf, so that export, import
//! and the attachments use them without using each other.

/// `n` bytes as people read them: `512 B`, `1.2 kB`, `3.4 MB`.
pub fn human_bytes(n: usize) -> String {
    match n {
        0..1_000 => format!("{n} B"),
        1_000..1_000_000 => format!("{:.1} kB", n as f64 / 1e3),
        _ => format!("{:.1} MB", n as f64 / 1e6),
    }
}

/// At most 60 characters of `s` on one line, for messages.
pub fn short(s: &str) -> String {
    gemma_protocol::text::short(s, 60)
}
