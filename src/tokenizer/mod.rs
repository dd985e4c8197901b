//! Text ↔ token ids over a `tokenizers::Tokenizer`. Chat templates live in [`template`],
//! streaming detokenization in [`stream`].

pub mod gguf;
pub mod stream;
pub mod template;

use std::path::Path;

use crate::error::{Error, Result};

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish()
    }
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("cannot load {}: {e}", path.display())))?;
        Ok(Self { inner })
    }

    /// Wraps an already built tokenizer.
    pub fn from_inner(inner: tokenizers::Tokenizer) -> Self {
        Self { inner }
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Encodes `text` as is: special-token strings (`<start_of_turn>`, `<|turn>`…) become their
    /// ids, and nothing is added in front.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::Tokenizer(format!("cannot encode: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text. With `skip_special`, control tokens are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| Error::Tokenizer(format!("cannot decode: {e}")))
    }

    /// The id of a token string, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}
