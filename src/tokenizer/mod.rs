//! Text ↔ token ids over a `tokenizers::Tokenizer`, with Gemma's special ids and the built-in
//! chat layouts. Streaming detokenization lives in [`stream`].

pub mod chat_template;
pub mod gguf;
pub mod stream;

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::config::Family;

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

/// The built-in chat layout's turn markers for a family: (open, close).
pub fn turn_markers(family: Family) -> (&'static str, &'static str) {
    match family {
        Family::Gemma4 => ("<|turn>", "<turn|>"),
        Family::Gemma3 => ("<start_of_turn>", "<end_of_turn>"),
    }
}

/// One user turn in the built-in layout, followed by the opening of the model's turn (thinking
/// off for Gemma 4: an empty thought channel).
pub fn user_turn(family: Family, user: &str) -> String {
    thinking_turn(family, user, false).turn
}

/// A user turn as the chat template renders it at the start of a conversation: the header that
/// opens the conversation (Gemma 4 with thinking on: a system turn with `<|think|>`) and the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnText {
    /// Text between BOS and the first user turn; empty for most conversations.
    pub header: String,
    /// The user turn and the opening of the model's turn.
    pub turn: String,
}

/// [`TurnText`] in the built-in layout. Thinking exists for Gemma 4 only; with it off, Gemma 4's
/// model turn opens with an empty thought channel, as the official template does.
pub fn thinking_turn(family: Family, user: &str, thinking: bool) -> TurnText {
    let (open, close) = turn_markers(family);
    let mut turn = format!("{open}user\n{}{close}\n{open}model\n", user.trim());
    let mut header = String::new();
    if family == Family::Gemma4 {
        if thinking {
            header = format!("{open}system\n<|think|>\n{close}\n");
        } else {
            turn.push_str("<|channel>thought\n<channel|>");
        }
    }
    TurnText { header, turn }
}
