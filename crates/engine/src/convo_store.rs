//! The conversations the engine owns, on disk ([`ConvoStore`]): for each chat the UI attached a
//! tab to, the conversation in token ids as the model saw it (BOS, header, every exchange up to
//! the end of the last answer), written atomically whenever a turn commits, and read back when
//! the chat is attached again. The ids belong to one model: a file names the fingerprint of the
//! weights and tokenizer it was written with, and one for other weights is not used (the engine
//! rebuilds the conversation from the transcript's text instead). The pictures and recordings in
//! a conversation are kept beside it (`media/`), one private copy each named by its key, and
//! referenced from it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use gemma_files::write_atomic;
use gemma_model::error::{Error, Result};

/// The file format's version.
const VERSION: u32 = 1;
/// The folder of the kept pictures and recordings, in the store's.
const MEDIA: &str = "media";
/// Where earlier releases kept them (read, never written).
const OLD_MEDIA: &str = "pictures";

/// One chat's conversation in ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedConvo {
    /// The conversation up to the end of its last answer.
    pub ids: Vec<u32>,
    /// Header ids after BOS.
    pub header: usize,
    /// Where the last answer starts in `ids`, for regenerate.
    pub last_answer: Option<usize>,
    /// Each exchange's answer start and end, counted from the first exchange (after BOS and the
    /// header); empty when not known (files of earlier releases).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exchanges: Vec<[usize; 2]>,
    /// The pictures in `ids`, each kept in the store under its key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pictures: Vec<SavedPicture>,
}

/// A picture (or a piece of a recording) of a saved conversation: where its placeholders start, its identity (the key of
/// its bytes and budget, [`crate::images::image_key`], as hex: the stored copy's name) and its
/// budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedPicture {
    /// Its first placeholder's position in the ids.
    pub at: usize,
    /// Its key, in hex.
    pub key: String,
    /// Soft tokens at most (0 for a recording).
    pub budget: usize,
    /// A piece of a recording (its copy a 16 kHz WAV file) rather than a picture.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub audio: bool,
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    model: String,
    #[serde(flatten)]
    convo: SavedConvo,
}

/// Where the conversations are kept, and for which model.
#[derive(Debug, Clone)]
pub struct ConvoStore {
    dir: PathBuf,
    model: String,
}

/// Whether `chat` can name a file: letters, digits, `-` and `_`, 1 to 128 of them.
pub fn valid_name(chat: &str) -> bool {
    (1..=128).contains(&chat.len())
        && chat
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ConvoStore {
    /// A store in `dir` for the model whose weights have `fingerprint`
    /// ([`super::kv_store::fingerprint`]).
    pub fn new(dir: PathBuf, fingerprint: String) -> Self {
        Self {
            dir,
            model: fingerprint,
        }
    }

    fn path(&self, chat: &str) -> Result<PathBuf> {
        if !valid_name(chat) {
            return Err(Error::Invalid(format!(
                "`{chat}` cannot name a conversation: use letters, digits, - and _"
            )));
        }
        Ok(self.dir.join(format!("{chat}.json")))
    }

    /// Writes `convo` as the conversation of `chat`.
    pub fn save(&self, chat: &str, convo: &SavedConvo) -> Result<()> {
        let path = self.path(chat)?;
        let file = File {
            version: VERSION,
            model: self.model.clone(),
            convo: convo.clone(),
        };
        let bytes = serde_json::to_vec(&file)
            .map_err(|e| Error::Invalid(format!("cannot write a conversation: {e}")))?;
        write_atomic(&path, &bytes).map_err(|e| Error::io(&path, e))
    }

    /// The conversation saved for `chat` with this model, if there is one that reads.
    pub fn load(&self, chat: &str) -> Option<SavedConvo> {
        let text = std::fs::read(self.path(chat).ok()?).ok()?;
        let file: File = serde_json::from_slice(&text).ok()?;
        (file.version == VERSION && file.model == self.model).then_some(file.convo)
    }

    /// Keeps a copy of a picture's `bytes` under `key` (hex), private to the user, so that the
    /// conversation can encode it again whatever becomes of the file it came from.
    pub fn keep_picture(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let path = self.picture_path(key, MEDIA)?;
        if path.is_file() || self.picture_path(key, OLD_MEDIA)?.is_file() {
            return Ok(());
        }
        let dir = self.dir.join(MEDIA);
        gemma_files::create_private_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        write_atomic(&path, bytes).map_err(|e| Error::io(&path, e))
    }

    /// The bytes of the picture or recording kept under `key`, if they are there (in `media/`,
    /// or in `pictures/` where earlier releases kept them).
    pub fn picture(&self, key: &str) -> Option<Vec<u8>> {
        [MEDIA, OLD_MEDIA].iter().find_map(|folder| {
            gemma_files::read_limited(
                &self.picture_path(key, folder).ok()?,
                gemma_media::picture::MAX_FILE.max(gemma_media::audio::MAX_FILE),
            )
            .ok()
        })
    }

    fn picture_path(&self, key: &str, folder: &str) -> Result<PathBuf> {
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::Invalid(format!("`{key}` is not a picture's key")));
        }
        Ok(self.dir.join(folder).join(key))
    }

    /// Forgets `chat`'s conversation (its tab was closed).
    pub fn remove(&self, chat: &str) {
        if let Ok(path) = self.path(chat) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_conversations_come_back_for_their_model_only() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = ConvoStore::new(dir.path().to_path_buf(), "weights-a".into());
        let convo = SavedConvo {
            ids: vec![2, 10, 11, 12],
            header: 1,
            last_answer: Some(3),
            exchanges: vec![[1, 2]],
            pictures: Vec::new(),
        };
        store.save("chat-1", &convo).expect("save");
        assert_eq!(store.load("chat-1"), Some(convo.clone()));
        assert_eq!(store.load("chat-2"), None);
        let other = ConvoStore::new(dir.path().to_path_buf(), "weights-b".into());
        assert_eq!(other.load("chat-1"), None, "other weights");
        assert!(store.save("../escape", &convo).is_err());
        assert_eq!(store.load("../escape"), None);
        std::fs::write(dir.path().join("bad.json"), b"{not json").expect("write");
        assert_eq!(store.load("bad"), None);
        store.remove("chat-1");
        assert_eq!(store.load("chat-1"), None);
    }

    /// Copies go to `media/`; those an earlier release kept in `pictures/` are still read.
    #[test]
    fn kept_copies_go_to_media_and_old_ones_are_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = ConvoStore::new(dir.path().to_path_buf(), "w".into());
        let (new, old) = ("a".repeat(64), "b".repeat(64));
        store.keep_picture(&new, b"new").expect("kept");
        assert!(dir.path().join("media").join(&new).is_file());
        std::fs::create_dir(dir.path().join("pictures")).expect("old folder");
        std::fs::write(dir.path().join("pictures").join(&old), b"old").expect("old copy");
        assert_eq!(store.picture(&new).as_deref(), Some(&b"new"[..]));
        assert_eq!(store.picture(&old).as_deref(), Some(&b"old"[..]));
        store.keep_picture(&old, b"old").expect("already kept");
        assert!(!dir.path().join("media").join(&old).exists());
        assert!(store.picture("not-a-key").is_none());
    }
}
