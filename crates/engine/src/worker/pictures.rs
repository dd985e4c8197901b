//! The engine thread's side of pictures and recordings sent with a message: the model's towers
//! ([`Towers`], each read on its first use: [`Lazy`]); the check that they can fit before any is encoded (the encoding itself is
//! `worker/encoding.rs`), a copy kept with the conversation (a recording: each 30-second piece)
//! once the turn starts; and the turn's ids with each picture's or piece's run of
//! placeholders in place of the template's marker, the conversation's earlier ones carried
//! along.

use super::Worker;
use crate::error::{Error, Result};
use crate::images::{MediaSpan, key_hex};
use crate::pictures::{self, Encoded, Marks};
use crate::protocol::{Attachment, Event, MediaKind, TabId};
use crate::tabs::TabState;
use std::cell::{Cell, OnceCell};
use std::rc::Rc;

use gemma_model::audio::AudioTower;
use gemma_model::audio::config::AudioSpec;
use gemma_model::checkpoint::UserTurn;
use gemma_model::deferred::Deferred;
use gemma_model::vision::VisionTower;
use gemma_model::vision::config::VisionSpec;

/// Bytes of a picture read to count its soft tokens before it is encoded.
const HEADER_BYTES: u64 = 1 << 20;

/// Reads a tower's weights.
type Load<T> = Box<dyn FnOnce() -> gemma_model::error::Result<T>>;

/// A tower the model has, or why it has none: its spec at once (the marks prompts need), its
/// weights read when the first picture or recording needs them (and said; a failure is kept
/// and told at each use).
pub struct Lazy<T, S> {
    spec: std::result::Result<S, String>,
    load: Cell<Option<Load<T>>>,
    tower: OnceCell<std::result::Result<T, String>>,
}

impl<T, S> Lazy<T, S> {
    /// A tower to open on first use, or why there is none.
    pub fn new(found: gemma_model::error::Result<Deferred<T, S>>) -> Self {
        let (spec, load) = match found {
            Ok(d) => (Ok(d.spec), Some(d.load)),
            Err(e) => (Err(e.to_string()), None),
        };
        Self {
            spec,
            load: Cell::new(load),
            tower: OnceCell::new(),
        }
    }

    /// None, for `why`.
    pub fn none(why: &str) -> Self {
        Self {
            spec: Err(why.into()),
            load: Cell::new(None),
            tower: OnceCell::new(),
        }
    }

    /// Its spec, or why the model has no such tower.
    pub fn spec(&self) -> std::result::Result<&S, &String> {
        self.spec.as_ref()
    }

    /// The tower, its weights read on the first call; or why there is none.
    pub fn get(&self) -> std::result::Result<&T, String> {
        if let Err(why) = &self.spec {
            return Err(why.clone());
        }
        let tower = self.tower.get_or_init(|| match self.load.take() {
            Some(load) => load().map_err(|e| e.to_string()),
            None => Err("the tower could not be opened".into()),
        });
        tower.as_ref().map_err(Clone::clone)
    }
}

/// The model's vision and audio towers, each or why the model has none.
#[derive(Clone)]
pub struct Towers {
    /// Reads pictures.
    pub vision: Rc<Lazy<VisionTower, VisionSpec>>,
    /// Hears recordings (Gemma 4 E2B and E4B).
    pub audio: Rc<Lazy<AudioTower, AudioSpec>>,
}

impl Towers {
    /// No tower: a text model.
    pub fn none() -> Self {
        Self {
            vision: Rc::new(Lazy::none("this model reads text only")),
            audio: Rc::new(Lazy::none("this model reads text only")),
        }
    }

    /// The ids that mark pictures and recordings for these towers.
    pub fn marks(&self) -> Marks {
        Marks {
            image: self
                .vision
                .spec()
                .ok()
                .map(|s| [s.boi_token_id, s.image_token_id, s.eoi_token_id]),
            audio: self
                .audio
                .spec()
                .ok()
                .map(|s| [s.boa_token_id, s.audio_token_id, s.eoa_token_id]),
        }
    }
}

impl Worker<'_> {
    /// Copies of a sent message's pictures and recordings for the conversation, once its turn
    /// has started (a message refused or stopped keeps none).
    pub(super) fn keep_all(&self, tab: TabId, encoded: &[Encoded]) {
        for e in encoded {
            self.keep(tab, e);
        }
    }

    /// Refuses, before any picture or recording is decoded or encoded, a message whose media
    /// alone cannot fit the tab's context even with nothing but the conversation's header
    /// before them (no compaction can make room): each picture counted from its header, each
    /// recording from its decoded length, with their begin and end marks. A file that cannot
    /// be counted is left to its encoding, which says why.
    pub(super) fn media_fits(&mut self, tab: TabId, attachments: &[Attachment]) -> Result<()> {
        if attachments.is_empty() {
            return Ok(());
        }
        let limit = self.context;
        let t = self.idle_tab(tab)?;
        let (limit, mut needed) = (t.context.min(limit), 1 + t.header.len());
        for a in attachments {
            needed += match a.kind {
                // The header lies in the first bytes; a picture whose header is further in
                // (a JPEG after a megabyte of metadata) is counted by its encoding.
                MediaKind::Image => gemma_files::read_head(&a.path, HEADER_BYTES)
                    .ok()
                    .and_then(|bytes| gemma_media::soft_tokens(&bytes, a.tokens))
                    .map_or(0, |n| n + 2),
                MediaKind::Audio => gemma_media::audio::Probe::open(&a.path)
                    .map_or(0, |p| p.tokens() + 2 * p.pieces()),
            };
        }
        if needed > limit {
            return Err(Error::Invalid(format!(
                "context length exceeded: the pictures and recordings alone take {needed} tokens \
                 with the conversation's opening, and the context holds {limit}; send fewer or \
                 shorter ones, a smaller /image-tokens budget, or raise context_length"
            )));
        }
        Ok(())
    }

    /// A copy for the conversation, so that it comes back whatever becomes of the file.
    pub(super) fn keep(&self, tab: TabId, e: &Encoded) {
        if let Some(store) = &self.convos
            && let Err(why) = store.keep_picture(&key_hex(&e.key), &e.bytes)
        {
            let what = match e.kind {
                MediaKind::Image => "picture",
                MediaKind::Audio => "recording",
            };
            self.emit(Event::Notice {
                tab,
                text: format!("the {what} is not kept with the chat: {why}"),
            });
        }
    }
}

/// The ids of the turn `turn` of tab `t` with `encoded` in place of the template's markers, and
/// every picture and piece of the conversation it makes (the earlier ones moved with a changed
/// header).
pub(super) fn place(
    t: &TabState,
    turn: &UserTurn,
    marks: &Marks,
    hidden: usize,
    encoded: &[Encoded],
) -> Result<(Vec<u32>, Vec<MediaSpan>)> {
    let (old_base, new_base) = (1 + t.header.len(), 1 + turn.header.len());
    let mut images = pictures::carry(
        &t.images,
        hidden,
        (&t.convo, old_base),
        (&turn.prompt, new_base),
    );
    if encoded.is_empty() {
        return Ok((turn.prompt.clone(), images));
    }
    let from = new_base + t.convo.len().saturating_sub(old_base);
    let (ids, placed) = pictures::expand(&turn.prompt, from, marks, encoded)?;
    images.extend(placed);
    Ok((ids, images))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// A tower whose spec is `7` and whose weights are `"read"` (or fail), counting the reads.
    fn lazy(reads: &Rc<Cell<usize>>, fails: bool) -> Lazy<&'static str, u32> {
        let counted = reads.clone();
        let load = Box::new(move || {
            counted.set(counted.get() + 1);
            match fails {
                false => Ok("read"),
                true => Err(gemma_model::error::Error::Invalid("a broken tower".into())),
            }
        });
        Lazy::new(Ok(Deferred { spec: 7, load }))
    }

    #[test]
    fn a_towers_weights_are_read_on_first_use_and_once() {
        let reads = Rc::new(Cell::new(0));
        let t = lazy(&reads, false);
        assert_eq!(t.spec(), Ok(&7), "the spec at once");
        assert_eq!(reads.get(), 0, "no weights read for the spec");
        assert_eq!(t.get(), Ok(&"read"));
        assert_eq!(t.get(), Ok(&"read"));
        assert_eq!(reads.get(), 1, "read once");
        // A tower that fails to read says so at each use, and is read once.
        let reads = Rc::new(Cell::new(0));
        let broken = lazy(&reads, true);
        for _ in 0..2 {
            let why = broken.get().expect_err("broken");
            assert!(why.contains("a broken tower"), "{why}");
        }
        assert_eq!(reads.get(), 1);
        let none: Lazy<&str, u32> = Lazy::none("this model reads text only");
        assert_eq!(none.get(), Err("this model reads text only".to_string()));
    }
}
