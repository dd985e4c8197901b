//! The engine thread's side of the UI's conversation tree: a tab tied to its saved chat and its
//! conversation brought back (`Command::Attach`) or saved, a tab moved to another path
//! (`Command::SetPath`) and a tab started as a copy of another (`Command::Fork`). The next turn
//! rewinds the session to what the paths share.

use super::Worker;
use crate::attach;
use crate::branch::{self, Setting};
use crate::convo_store::{SavedConvo, SavedPicture};
use crate::error::Result;
use crate::images::key_hex;
use crate::protocol::{Event, Exchange, LegacyConvo, TabId};
use crate::tabs::Stores;

impl Worker<'_> {
    /// Ties `tab` to `chat` and brings its conversation back (see [`attach::attach`]).
    pub(super) fn attach(
        &mut self,
        tab: TabId,
        chat: String,
        history: Vec<Exchange>,
        legacy: Option<LegacyConvo>,
    ) -> Result<()> {
        let (lm, end_ids) = (self.lm, self.end_ids.clone());
        let (towers, text) = (self.towers.clone(), self.tool_text());
        let stores = Stores {
            kv: self.kv.clone(),
            convos: self.convos.clone(),
        };
        let t = self.idle_tab(tab)?;
        let request = attach::Request {
            chat,
            history,
            legacy,
            towers,
            text,
        };
        let Some(origin) = attach::attach(t, lm, &end_ids, &stores, request)? else {
            return Ok(());
        };
        if origin != attach::Origin::Saved {
            self.save_convo(tab);
        }
        if origin == attach::Origin::WithoutPictures {
            self.emit(Event::Notice {
                tab,
                text: "this chat's pictures or recordings could not be brought back (their \
                       kept copies are gone or changed, or this model has no tower for them): \
                       it goes on from its text, without them"
                    .into(),
            });
        }
        let tokens = self.tabs.get_mut(tab).map_or(0, |t| t.convo.len());
        self.emit(Event::Committed { tab, tokens });
        self.report_tiers();
        Ok(())
    }

    /// Saves the tab's conversation with its chat, when it is attached to one; a failure is
    /// told, and the conversation stays in memory.
    pub(super) fn save_convo(&mut self, tab: TabId) {
        let Some(store) = self.convos.clone() else {
            return;
        };
        let Some(t) = self.tabs.get_mut(tab) else {
            return;
        };
        let Some(chat) = t.chat.clone() else { return };
        let convo = SavedConvo {
            ids: t.convo.clone(),
            header: t.header.len(),
            last_answer: t.last_answer,
            exchanges: t.held.as_deref().map(attach::spans).unwrap_or_default(),
            pictures: t
                .images
                .iter()
                .map(|i| SavedPicture {
                    at: i.at,
                    key: key_hex(&i.key),
                    budget: i.budget,
                    audio: i.kind == crate::protocol::MediaKind::Audio,
                })
                .collect(),
        };
        if let Err(e) = store.save(&chat, &convo) {
            self.emit(Event::Failed {
                tab,
                error: format!("the conversation could not be saved: {e}"),
            });
        }
    }

    /// Gives `tab` a copy of `from`'s session and conversation (nothing when `from` is gone).
    pub(super) fn fork(&mut self, tab: TabId, from: TabId) -> Result<()> {
        let Some(src) = self.tabs.get_mut(from) else {
            return Ok(());
        };
        let copy = (
            src.session.clone(),
            src.convo.clone(),
            src.header.clone(),
            src.last_answer,
            src.held.clone(),
            src.images.clone(),
        );
        let t = self.idle_tab(tab)?;
        (
            t.session,
            t.convo,
            t.header,
            t.last_answer,
            t.held,
            t.images,
        ) = copy;
        self.enforce_budget(tab);
        Ok(())
    }

    /// Moves the tab's conversation to another path of the UI's tree (see
    /// [`branch::rebase`]); the next turn rewinds the session to what the two share.
    pub(super) fn set_path(&mut self, tab: TabId, history: &[Exchange]) -> Result<()> {
        let (lm, marks, context) = (self.lm, self.towers.marks(), self.context);
        let decl = Self::declarations(&self.declarable(tab).0);
        let text = self.tool_text();
        let t = self.idle_tab(tab)?;
        let setting = Setting::of(&t.settings, marks, t.context.min(context))
            .with_tools(decl)
            .with_text(text);
        let r = branch::rebase(
            lm,
            &t.convo,
            t.header.len(),
            t.held.as_deref(),
            history,
            &setting,
        )?;
        self.adopt(tab, r)
    }

    /// Makes `r` the tab's conversation, its pictures carried where the ids are shared, saved
    /// and told ([`Event::Committed`], [`Event::Rebased`]; a picture or recording it could not
    /// place again, with a notice).
    pub(super) fn adopt(&mut self, tab: TabId, r: branch::Rendered) -> Result<()> {
        let lm = self.lm;
        if r.left_out > 0 {
            self.emit(Event::Notice {
                tab,
                text: format!(
                    "{} picture(s) or recording(s) of this conversation could not be placed \
                     again (their files are gone or unreadable, or this model has no tower for \
                     them): the model sees their text only",
                    r.left_out
                ),
            });
        }
        if r.calls_left_out > 0 {
            self.emit(Event::Notice {
                tab,
                text: format!(
                    "{} tool call(s) of this conversation are not written again (this model \
                     writes no tool calls, or their arguments are not an object): the model \
                     sees the answers' text only",
                    r.calls_left_out
                ),
            });
        }
        let t = self.idle_tab(tab)?;
        t.last_answer = r.last_answer();
        // The pictures of the exchanges the two paths share keep their place (and their rows);
        // those rendered here join them, to be encoded when a prefill reaches them.
        let carried = crate::pictures::carry(
            &t.images,
            lm.model.config().hidden_size,
            (&t.convo, 1 + t.header.len()),
            (&r.ids, 1 + r.header),
        );
        t.images = crate::pictures::merge(carried, r.images);
        t.header = r.ids.get(1..1 + r.header).unwrap_or_default().to_vec();
        t.convo = r.ids;
        t.held = Some(r.held);
        let tokens = t.convo.len();
        let common = branch::common_prefix(t.session.resident(), &t.convo);
        if let Some(e) = r.template_error {
            self.template_failed(tab, e);
        }
        self.save_convo(tab);
        self.emit(Event::Committed { tab, tokens });
        self.emit(Event::Rebased {
            tab,
            tokens,
            common,
        });
        Ok(())
    }
}
