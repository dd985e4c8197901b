//! Incremental detokenization: turns a growing list of ids into text deltas without ever
//! splitting a UTF-8 character or losing SentencePiece's leading spaces.
//!
//! Decoding one token at a time is wrong for byte-fallback pieces (`<0xE2>` `<0x82>` `<0xAC>` make
//! one `€`). We decode a short window from a prefix offset and emit only what is new and complete
//! (the scheme of text-generation-inference's `decode_token`).

use super::Tokenizer;
use crate::error::Result;

/// Streaming decoder for one generation.
#[derive(Debug, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one id; returns the text it completes, possibly empty.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tok.decode(&self.ids[self.prefix..self.read], true)?;
        let after = tok.decode(&self.ids[self.prefix..], true)?;
        if after.len() > before.len() && !after.ends_with('\u{FFFD}') {
            let delta = after
                .get(before.len()..)
                .map(String::from)
                .unwrap_or_default();
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(delta)
        } else {
            Ok(String::new())
        }
    }

    /// Whatever is still held back at the end of the generation (an incomplete character is
    /// flushed as U+FFFD).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String> {
        let before = tok.decode(&self.ids[self.prefix..self.read], true)?;
        let after = tok.decode(&self.ids[self.prefix..], true)?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(after
            .get(before.len()..)
            .map(String::from)
            .unwrap_or_default())
    }
}
