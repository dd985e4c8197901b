//! Which ids mark a tower's runs in a model's prompts (begin, placeholder, end): one resolver for
//! pictures and recordings alike, from the checkpoint's `config.json`, the tokenizer's named
//! tokens, a hint, or Gemma 4's own ids, and checked against the vocabulary.

use std::path::Path;

use crate::checkpoint::LoadedModel;

/// Whether `path` names a GGUF file (by its extension).
pub(crate) fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// The ids of one kind of run, and where to look for them.
pub(crate) struct Lookup<'a> {
    /// The ids the checkpoint's `config.json` names, when it names them.
    pub from_config: Option<[u32; 3]>,
    /// The tokens' names in the vocabulary: placeholder, begin, end.
    pub names: [&'a str; 3],
    /// Ids to take when neither names them.
    pub hint: Option<[u32; 3]>,
    /// Gemma 4's ids.
    pub default: [u32; 3],
}

/// The ids `l` resolves to for `lm` (placeholder, begin, end): a GGUF's vocabulary before a
/// `config.json` beside it, a checkpoint's `config.json` before its tokenizer; `None` when one of
/// them lies outside the vocabulary (the model takes no such runs).
pub(crate) fn resolve(lm: &LoadedModel, l: Lookup) -> Option<[u32; 3]> {
    let tok = |t: &str| lm.tokenizer.as_ref().and_then(|k| k.token_id(t));
    let from_vocab = || Some([tok(l.names[0])?, tok(l.names[1])?, tok(l.names[2])?]);
    let named = if is_gguf(&lm.path) {
        from_vocab().or(l.from_config)
    } else {
        l.from_config.or_else(from_vocab)
    };
    let ids = named.or(l.hint).unwrap_or(l.default);
    let vocab = lm.model.config().vocab_size;
    ids.iter().all(|&i| (i as usize) < vocab).then_some(ids)
}
