//! The library's typed errors. Every message says what went wrong and, where it can, what to do.
//!
//! `main` wraps these in `anyhow` for the command line; nothing in the library panics on bad input.

use std::path::PathBuf;

/// Errors from loading a model, its configuration or its tokenizer, and from running it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (in the message; not a separate `source`, so that a report of the chain
        /// does not say it twice).
        cause: std::io::Error,
    },
    /// The model's `config.json` (or the metadata standing in for it) is invalid.
    #[error("invalid model config {path}: {msg}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A weight tensor is missing.
    #[error("tensor `{name}` is missing from {path} (expected shape {expected:?})")]
    MissingTensor {
        /// Canonical tensor name.
        name: String,
        /// Expected shape.
        expected: Vec<usize>,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A weight tensor has the wrong shape.
    #[error("tensor `{name}` in {path} has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// Canonical tensor name.
        name: String,
        /// Expected shape.
        expected: Vec<usize>,
        /// Shape found in the file.
        actual: Vec<usize>,
        /// The file holding it.
        path: PathBuf,
    },
    /// A weight file could not be parsed.
    #[error("invalid weight file {path}: {msg}")]
    Weights {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The tokenizer could not be loaded or used.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A chat template failed (its message; `tokenizer::template::TemplateError` converts).
    #[error("{0}")]
    Template(String),
    /// A token id is outside the model's vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab})")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// The prompt plus the requested tokens do not fit the context.
    #[error(
        "context length exceeded: {needed} tokens needed, the limit is {limit}; \
         start a new chat or raise context_length"
    )]
    ContextLengthExceeded {
        /// Tokens the request needs.
        needed: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The input is unusable (an empty prompt, a bad argument).
    #[error("{0}")]
    Invalid(String),
    /// The compute backend failed.
    #[error("backend: {0}")]
    Backend(String),
}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            cause: source,
        }
    }

    pub(crate) fn config(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Config {
            path: path.into(),
            msg: msg.into(),
        }
    }
}
