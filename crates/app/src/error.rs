//! The front end's typed errors; every message says what went wrong and what to do.

use std::path::{Path, PathBuf};

/// Errors from the configuration, the terminal and saving chats.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        cause: std::io::Error,
    },
    /// The user's configuration file is invalid: the message names the file, the place, the key
    /// and the rule.
    #[error("invalid configuration: {0}")]
    Settings(String),
    /// Chats could not be saved.
    #[error("{0}")]
    Save(String),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, cause: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            cause,
        }
    }
}

/// The front end's result type.
pub type Result<T> = std::result::Result<T, Error>;
