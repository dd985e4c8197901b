//! Text ↔ token ids over a `tokenizers::Tokenizer`. Chat templates live in [`template`],
//! streaming detokenization in [`stream`].

pub mod gguf;
pub mod spm;
pub mod stream;
pub mod template;

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
        if text.len() > MAX_TEXT {
            return Err(Error::Tokenizer(format!(
                "the text to tokenize is {:.1} MiB, over the {} MiB gemma-chat tokenizes at once \
                 (far more than any context holds): shorten the message or the conversation",
                text.len() as f64 / (1 << 20) as f64,
                MAX_TEXT >> 20
            )));
        }
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

    /// Decodes ids to text. With `skip_special`, control tokens are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        match &self.inner {
            Inner::Hf(t) => t
                .decode(ids, skip_special)
                .map_err(|e| Error::Tokenizer(format!("cannot decode: {e}"))),
            Inner::Spm(s) => Ok(s.decode(ids, skip_special)),
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
