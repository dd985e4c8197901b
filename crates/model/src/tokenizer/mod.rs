//! Text ↔ token ids over a `tokenizers::Tokenizer`. Chat templates live in [`template`],
//! streaming detokenization in [`stream`].

pub mod gguf;
pub mod spm;
pub mod stream;
pub mod template;

use std::ops::Range;
use std::path::Path;

use crate::error::{Error, Result};

/// Most bytes of text tokenized at once: four times what the largest context (256K tokens)
/// holds, so no real prompt comes near it, while a tokenizer's working memory (up to ~170 bytes
/// a byte of text) stays under a gigabyte.
pub const MAX_TEXT: usize = 4 << 20;

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: Inner,
}

enum Inner {
    /// A `tokenizer.json`, or a GGUF vocabulary that lists its merges.
    Hf(Box<tokenizers::Tokenizer>),
    /// A GGUF SentencePiece vocabulary (scores, no merges).
    Spm(Box<spm::Spm>),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vocab = match &self.inner {
            Inner::Hf(t) => t.get_vocab_size(true),
            Inner::Spm(s) => s.len(),
        };
        f.debug_struct("Tokenizer").field("vocab", &vocab).finish()
    }
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("cannot load {}: {e}", path.display())))?;
        Ok(Self::from_inner(inner))
    }

    /// Wraps an already built tokenizer.
    pub fn from_inner(inner: tokenizers::Tokenizer) -> Self {
        Self {
            inner: Inner::Hf(Box::new(inner)),
        }
    }

    /// Wraps a SentencePiece vocabulary.
    pub fn from_spm(spm: spm::Spm) -> Self {
        Self {
            inner: Inner::Spm(Box::new(spm)),
        }
    }

    /// The piece of an id, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<String> {
        match &self.inner {
            Inner::Hf(t) => t.id_to_token(id),
            Inner::Spm(s) => ((id as usize) < s.len()).then(|| s.piece(id).to_string()),
        }
    }

    /// Encodes `text` as is: special-token strings (`<start_of_turn>`, `<|turn>`…) become their
    /// ids, and nothing is added in front.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.check_len(text)?;
        match &self.inner {
            Inner::Hf(t) => {
                let enc = t
                    .encode(text, false)
                    .map_err(|e| Error::Tokenizer(format!("cannot encode: {e}")))?;
                Ok(enc.get_ids().to_vec())
            }
            Inner::Spm(s) => Ok(s.encode(text)),
        }
    }

    /// Encodes `text` as [`Self::encode`] does, except inside the `guarded` byte ranges (what a
    /// user wrote: a message, an attached file and its name, a system prompt): there a
    /// special-token string is plain text, as llama.cpp's `parse_special = false` treats user
    /// content. Only the chat template writes control tokens. Text without special-token
    /// strings in its guarded ranges tokenizes exactly as [`Self::encode`] makes it.
    pub fn encode_guarded(&self, text: &str, guarded: &[Range<usize>]) -> Result<Vec<u32>> {
        if guarded.is_empty() {
            return self.encode(text);
        }
        self.check_len(text)?;
        let inside = |start: usize, end: usize| {
            guarded
                .iter()
                .any(|g| start < g.end && g.start < end.max(start + 1))
        };
        let t = match &self.inner {
            Inner::Spm(s) => return Ok(s.encode_unless(text, &inside)),
            Inner::Hf(t) => t,
        };
        let enc = t
            .encode(text, false)
            .map_err(|e| Error::Tokenizer(format!("cannot encode: {e}")))?;
        let added = t.get_added_vocabulary().get_added_tokens_decoder();
        let mut out = Vec::with_capacity(enc.get_ids().len());
        for (&id, &(start, end)) in enc.get_ids().iter().zip(enc.get_offsets()) {
            if added.get(&id).is_some_and(|a| a.special) && inside(start, end) {
                out.extend(self.byte_tokens(&text[start..end]));
            } else {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// `text` spelled in the vocabulary's byte tokens (`<0xXX>`; a byte without one is dropped):
    /// how a control token's text is written as plain text.
    pub fn byte_tokens<'a>(&'a self, text: &'a str) -> impl Iterator<Item = u32> + 'a {
        text.bytes()
            .filter_map(|b| self.token_id(&format!("<0x{b:02X}>")))
    }

    /// Refuses a text over [`MAX_TEXT`].
    fn check_len(&self, text: &str) -> Result<()> {
        if text.len() > MAX_TEXT {
            return Err(Error::Tokenizer(format!(
                "the text to tokenize is {:.1} MiB, over the {} MiB gemma-chat tokenizes at once \
                 (far more than any context holds): shorten the message or the conversation",
                text.len() as f64 / (1 << 20) as f64,
                MAX_TEXT >> 20
            )));
        }
        Ok(())
    }

    /// Decodes ids to text. With `skip_special`, control tokens are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        match &self.inner {
            Inner::Hf(t) => t
                .decode(ids, skip_special)
                .map_err(|e| Error::Tokenizer(format!("cannot decode: {e}"))),
            Inner::Spm(s) => Ok(s.decode(ids, skip_special)),
        }
    }

    /// Each id's bytes in text, for constrained decoding: `▁` read as a space, a byte-fallback
    /// piece (`<0xXX>`) as its byte; `None` for special tokens (control and added ones), which
    /// never spell text.
    pub fn vocab_bytes(&self) -> Vec<Option<Vec<u8>>> {
        match &self.inner {
            Inner::Hf(t) => {
                let added = t.get_added_tokens_decoder();
                (0..t.get_vocab_size(true) as u32)
                    .map(|id| {
                        let plain = added.get(&id).is_none_or(|a| !a.special);
                        let piece = t.id_to_token(id).filter(|_| plain)?;
                        let piece = piece.replace('\u{2581}', " ");
                        Some(spm::byte_of(&piece).map_or_else(|| piece.into_bytes(), |b| vec![b]))
                    })
                    .collect()
            }
            Inner::Spm(s) => (0..s.len() as u32).map(|id| s.piece_bytes(id)).collect(),
        }
    }

    /// The id of a token string, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.inner {
            Inner::Hf(t) => t.token_to_id(token),
            Inner::Spm(s) => s.id(token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocab_bytes_spell_text_and_leave_control_tokens_out() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny_chat_gemma4/tokenizer.json");
        let tok = Tokenizer::from_file(&path).expect("tokenizer");
        let bytes = tok.vocab_bytes();
        for special in ["<bos>", "<|tool_call>", "<|\"|>", "<turn|>"] {
            let id = tok.token_id(special).expect(special) as usize;
            assert_eq!(bytes[id], None, "{special}");
        }
        let newline = tok.token_id("<0x0A>").expect("byte fallback") as usize;
        assert_eq!(bytes[newline].as_deref(), Some(&b"\n"[..]));
        // Every plain id's bytes are what decoding it gives (▁ read as a space).
        let mut checked = 0;
        for (id, b) in bytes.iter().enumerate() {
            let Some(b) = b else { continue };
            if let Ok(text) = std::str::from_utf8(b)
                && !tok.token(id as u32).unwrap_or_default().starts_with("<0x")
            {
                let decoded = tok.decode(&[tok.token_id("a").expect("a"), id as u32], false);
                assert_eq!(decoded.expect("decodes"), format!("a{text}"), "id {id}");
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }
}
