//! A tower opened in two steps ([`Deferred`]): what prompts need of it at once (its spec: the
//! ids that mark its media, its soft-token counts), and its weights when the first picture or
//! recording needs them. A chat that never attaches one never reads them.

use crate::error::Result;

/// A tower's spec now, its weights later.
pub struct Deferred<T, S> {
    /// What the tower is.
    pub spec: S,
    /// Reads its weights.
    pub load: Box<dyn FnOnce() -> Result<T>>,
}

impl<T, S> Deferred<T, S> {
    /// The tower, its weights read now.
    pub fn open(self) -> Result<T> {
        (self.load)()
    }
}

impl<T, S: std::fmt::Debug> std::fmt::Debug for Deferred<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({:?})", self.spec)
    }
}
