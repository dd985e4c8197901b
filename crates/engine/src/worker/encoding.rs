//! A message's pictures and recordings encoded a unit at a time (a picture, or a recording's
//! 30-second piece) as a step of the engine loop, like a prefill chunk: the other tabs' turns go
//! on between units, a stop (Esc, the tab's closing) ends it before the next unit with
//! [`sounds::STOPPED`], and once every unit is in, the message's turn starts
//! ([`Worker::submit_encoded`]).

use std::collections::VecDeque;

use super::Worker;
use crate::error::{Error, Result};
use crate::pictures::{self, Encoded};
use crate::protocol::{Attachment, Event, MediaKind, TabId};
use crate::sounds;

/// A message waiting for its media: what it will send, and how far the encoding is.
pub(crate) struct Encoding {
    /// The message's text.
    pub text: String,
    /// Its pictures and recordings.
    pub attachments: Vec<Attachment>,
    /// Compaction rounds left for its turn (see `Worker::submit`).
    pub rounds: u8,
    /// What is encoded so far, in order.
    pub done: Vec<Encoded>,
    /// The next attachment to start.
    next: usize,
    /// The pieces of the recording under way not yet encoded (16 kHz WAV each).
    pieces: VecDeque<Vec<u8>>,
}

impl Encoding {
    pub fn new(text: &str, attachments: &[Attachment], rounds: u8) -> Self {
        Self {
            text: text.to_string(),
            attachments: attachments.to_vec(),
            rounds,
            done: Vec::new(),
            next: 0,
            pieces: VecDeque::new(),
        }
    }

    fn finished(&self) -> bool {
        self.next == self.attachments.len() && self.pieces.is_empty()
    }
}

impl Worker<'_> {
    /// One unit of `tab`'s encoding; the turn starts after the last. What fails (or is stopped)
    /// ends the message and is told to the tab.
    pub(super) fn encoding_step(&mut self, tab: TabId) {
        let Some(mut enc) = self.tabs.get_mut(tab).and_then(|t| t.encoding.take()) else {
            return;
        };
        let result = match self.encode_unit(tab, &mut enc) {
            Ok(()) if enc.finished() => {
                let Encoding {
                    text,
                    attachments,
                    rounds,
                    done,
                    ..
                } = enc;
                self.submit_encoded(tab, &text, &attachments, rounds, done)
            }
            Ok(()) => {
                if let Some(t) = self.tabs.get_mut(tab) {
                    t.encoding = Some(enc);
                }
                Ok(())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            self.emit(Event::Failed {
                tab,
                error: e.to_string(),
            });
        }
    }

    /// Encodes the next picture or recording piece of `enc` (a recording is first cut into its
    /// pieces, the tab told as each attachment starts).
    fn encode_unit(&self, tab: TabId, enc: &mut Encoding) -> Result<()> {
        if self.interrupts.raised(tab) {
            return Err(Error::Invalid(sounds::STOPPED.into()));
        }
        if let Some(wav) = enc.pieces.pop_front() {
            // The recording the pieces are of is the attachment started last.
            let path = &enc.attachments[enc.next - 1].path;
            let tower = self
                .towers
                .audio
                .get()
                .map_err(no_tower(MediaKind::Audio))?;
            enc.done.push(sounds::encode_from(tower, wav, path)?);
            return Ok(());
        }
        let a = &enc.attachments[enc.next];
        enc.next += 1;
        let name = a.path.file_name().unwrap_or(a.path.as_os_str()).display();
        match a.kind {
            MediaKind::Image => {
                let tower = self.towers.vision.get();
                let tower = tower.map_err(no_tower(MediaKind::Image))?;
                let text = format!("encoding {name} ({} image tokens at most)", a.tokens);
                self.emit(Event::Notice { tab, text });
                enc.done.push(pictures::encode(tower, &a.path, a.tokens)?);
            }
            MediaKind::Audio => {
                let tower = self.towers.audio.get();
                tower.map_err(no_tower(MediaKind::Audio))?;
                let text = format!("encoding the recording {name}");
                self.emit(Event::Notice { tab, text });
                enc.pieces = sounds::pieces(&a.path)?.into();
            }
        }
        Ok(())
    }

    /// Stops `tab`'s encoding, if it has one under way: its message is not sent, and says so.
    pub(super) fn stop_encoding(&mut self, tab: TabId) {
        if self
            .tabs
            .get_mut(tab)
            .and_then(|t| t.encoding.take())
            .is_some()
        {
            self.emit(Event::Failed {
                tab,
                error: sounds::STOPPED.into(),
            });
        }
    }
}

impl Worker<'_> {
    /// Rows for the pictures and recordings `turn` will prefill that a warm re-attach left
    /// unencoded (`attach::pictures_of`), from the conversation's kept copies; the tab keeps
    /// them for its later turns. Nothing runs when the prefill starts after them.
    pub(super) fn fill_rows(&mut self, tab: TabId, turn: &mut crate::turn::Turn) -> Result<()> {
        let (from, images) = turn.images_from();
        let mut filled = Vec::new();
        for image in images
            .iter_mut()
            .filter(|i| i.pending() && i.at + i.tokens > from)
        {
            let key = crate::images::key_hex(&image.key);
            // A rebuilt conversation's media carry their file; a saved one's are in its store.
            let copy = match &image.source {
                Some(bytes) => Some(bytes.to_vec()),
                None => self.convos.as_ref().and_then(|store| store.picture(&key)),
            };
            let gone = || {
                Error::Invalid(
                    "a picture or recording of this conversation is no longer kept with it: \
                     /reset starts the conversation over"
                        .into(),
                )
            };
            let bytes = copy.ok_or_else(gone)?;
            let e = match image.kind {
                MediaKind::Image => {
                    let tower = self.towers.vision.get();
                    let tower = tower.map_err(no_tower(MediaKind::Image))?;
                    pictures::encode_bytes(tower, bytes, "a kept picture", image.budget)?
                }
                MediaKind::Audio => {
                    let tower = self.towers.audio.get();
                    let tower = tower.map_err(no_tower(MediaKind::Audio))?;
                    sounds::encode_piece(tower, bytes, "a kept recording")?
                }
            };
            if e.tokens != image.tokens || e.key != image.key {
                return Err(gone());
            }
            if image.source.is_some() {
                // Kept with the conversation, so that a restart finds it as a sent one's.
                self.keep(tab, &e);
            }
            image.rows = e.rows;
            image.source = None;
            filled.push((image.at, image.key, image.rows.clone()));
            let what = match image.kind {
                MediaKind::Image => "picture",
                MediaKind::Audio => "recording",
            };
            let text =
                format!("encoding a {what} of the conversation again: this turn prefills it");
            self.emit(Event::Notice { tab, text });
        }
        if let Some(t) = self.tabs.get_mut(tab) {
            for i in &mut t.images {
                if let Some((_, _, rows)) =
                    filled.iter().find(|(at, k, _)| *at == i.at && *k == i.key)
                {
                    i.rows = rows.clone();
                    i.source = None;
                }
            }
        }
        Ok(())
    }
}

/// The error for media of `kind` on a model without that tower (`why`: why there is none).
fn no_tower(kind: MediaKind) -> impl Fn(String) -> Error {
    move |why| Error::NoTower { kind, why }
}
