//! The engine thread's side of pictures sent with a message: each attachment encoded by the
//! model's tower (a copy kept with the conversation), and the turn's ids with each picture's
//! run of placeholders in place of the template's marker, the conversation's earlier pictures
//! carried along.

use super::Worker;
use crate::images::{Image, key_hex};
use crate::pictures::{self, Encoded};
use crate::protocol::{Attachment, Event, TabId};
use crate::tabs::TabState;
use gemma_model::checkpoint::UserTurn;
use gemma_model::error::{Error, Result};
use gemma_model::vision::config::VisionSpec;

impl Worker<'_> {
    /// Each attached picture encoded by the model's tower, the tab told as each one starts.
    pub(super) fn encode(&self, tab: TabId, attachments: &[Attachment]) -> Result<Vec<Encoded>> {
        if attachments.is_empty() {
            return Ok(Vec::new());
        }
        let tower = self
            .tower
            .as_ref()
            .map_err(|why| Error::Invalid(format!("this model cannot take pictures: {why}")))?;
        attachments
            .iter()
            .map(|a| {
                let name = a.path.file_name().unwrap_or(a.path.as_os_str());
                self.emit(Event::Notice {
                    tab,
                    text: format!(
                        "encoding {} ({} image tokens at most)",
                        name.display(),
                        a.tokens
                    ),
                });
                let e = pictures::encode(tower, &a.path, a.tokens)?;
                // A copy for the conversation, so that it comes back whatever becomes of the
                // file.
                if let Some(store) = &self.convos
                    && let Err(why) = store.keep_picture(&key_hex(&e.key), &e.bytes)
                {
                    self.emit(Event::Notice {
                        tab,
                        text: format!("the picture is not kept with the chat: {why}"),
                    });
                }
                Ok(e)
            })
            .collect()
    }
}

/// The ids of the turn `turn` of tab `t` with `encoded` in place of the template's markers, and
/// every picture of the conversation it makes (the earlier ones moved with a changed header).
pub(super) fn place(
    t: &TabState,
    turn: &UserTurn,
    spec: Option<&VisionSpec>,
    hidden: usize,
    encoded: &[Encoded],
) -> Result<(Vec<u32>, Vec<Image>)> {
    let (old_base, new_base) = (1 + t.header.len(), 1 + turn.header.len());
    let mut images = pictures::carry(
        &t.images,
        hidden,
        (&t.convo, old_base),
        (&turn.prompt, new_base),
    );
    let Some(spec) = spec.filter(|_| !encoded.is_empty()) else {
        return Ok((turn.prompt.clone(), images));
    };
    let from = new_base + t.convo.len().saturating_sub(old_base);
    let (ids, placed) = pictures::expand(&turn.prompt, from, spec, encoded)?;
    images.extend(placed);
    Ok((ids, images))
}
