//! The engine thread's side of pictures and recordings sent with a message: the model's towers
//! ([`Towers`]); the check that they can fit before any is encoded (the encoding itself is
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
use gemma_model::audio::AudioTower;
use gemma_model::checkpoint::UserTurn;
use gemma_model::vision::VisionTower;

/// Bytes of a picture read to count its soft tokens before it is encoded.
const HEADER_BYTES: u64 = 1 << 20;

/// The model's vision and audio towers, each or why the model has none.
#[derive(Debug, Clone)]
pub struct Towers<'a> {
    /// Reads pictures.
    pub vision: std::result::Result<&'a VisionTower, String>,
    /// Hears recordings (Gemma 4 E2B and E4B).
    pub audio: std::result::Result<&'a AudioTower, String>,
}

impl Towers<'_> {
    /// No tower: a text model.
    pub fn none() -> Self {
        Self {
            vision: Err("this model reads text only".into()),
            audio: Err("this model reads text only".into()),
        }
    }

    /// The ids that mark pictures and recordings for these towers.
    pub fn marks(&self) -> Marks {
        Marks {
            image: self.vision.as_ref().ok().map(|t| {
                let s = t.spec();
                [s.boi_token_id, s.image_token_id, s.eoi_token_id]
            }),
            audio: self.audio.as_ref().ok().map(|t| {
                let s = t.spec();
                [s.boa_token_id, s.audio_token_id, s.eoa_token_id]
            }),
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
    fn keep(&self, tab: TabId, e: &Encoded) {
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
