//! Where an attached tab's conversation comes from ([`conversation`]): what the engine saved for
//! the chat with these weights; else what an earlier release saved in the chat file (brought to
//! today's form); else the transcript's text, rendered turn by turn with the chat template the way
//! the turns were first sent. Every candidate is checked against the model before it is used.

use super::convo_store::{self, ConvoStore, SavedConvo};
use super::protocol::{Exchange, LegacyConvo};
use super::tabs::Stores;
use super::tabs::TabState;
use crate::error::{Error, Result};
use crate::load::LoadedModel;

/// Where a conversation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// The engine's own store: exactly the ids the model saw.
    Saved,
    /// A chat file of an earlier release.
    Legacy,
    /// Rebuilt from the transcript's text.
    Rebuilt,
}

/// What the UI asked for: see [`super::protocol::Command::Attach`].
pub(super) struct Request {
    pub chat: String,
    pub history: Vec<Exchange>,
    pub legacy: Option<LegacyConvo>,
}

/// Ties tab `t` to `r.chat` and brings its conversation back: warm when a KV snapshot of it
/// verifies, else marked so that the next turn prefills it (reason `restored`). Where it came
/// from, or `None` when the tab was attached already or the chat holds no exchange yet.
pub(super) fn attach(
    t: &mut TabState,
    lm: &LoadedModel,
    end_ids: &[u32],
    stores: &Stores,
    r: Request,
) -> Result<Option<Origin>> {
    if !convo_store::valid_name(&r.chat) {
        return Err(Error::Invalid(format!(
            "`{}` cannot name a chat: use letters, digits, - and _",
            r.chat
        )));
    }
    if t.chat.as_deref() == Some(r.chat.as_str()) {
        // Attached already: its conversation is the one in memory.
        return Ok(None);
    }
    t.chat = Some(r.chat.clone());
    let legacy_ids = r.legacy.as_ref().map(|l| l.ids.clone());
    let setting = Setting {
        system: t.system.as_deref(),
        thinking: t.thinking,
    };
    let store = stores.convos.as_ref();
    let found = conversation(lm, end_ids, store, &r.chat, &r.history, r.legacy, &setting)?;
    let Some((convo, origin)) = found else {
        return Ok(None);
    };
    t.session.reset();
    t.convo = convo.ids;
    t.header = t.convo[1..1 + convo.header].to_vec();
    t.last_answer = convo.last_answer;
    // With a snapshot that verifies, the tab is warm (in host memory) at once; one saved by an
    // earlier release is found under the ids it was saved with.
    let warm = stores.kv.as_ref().is_some_and(|kv| {
        kv.load(&t.convo, &lm.model, &mut t.session)
            || legacy_ids.is_some_and(|ids| kv.load(&ids, &lm.model, &mut t.session))
    });
    if !warm {
        t.session.mark_restored();
    }
    Ok(Some(origin))
}

/// What the tab talks to the model in.
struct Setting<'a> {
    system: Option<&'a str>,
    thinking: bool,
}

/// The conversation for `chat` and where it came from; `None` for a chat with no exchanges.
fn conversation(
    lm: &LoadedModel,
    end_ids: &[u32],
    store: Option<&ConvoStore>,
    chat: &str,
    history: &[Exchange],
    legacy: Option<LegacyConvo>,
    setting: &Setting,
) -> Result<Option<(SavedConvo, Origin)>> {
    if let Some(saved) = store.and_then(|s| s.load(chat)).filter(|c| fits(lm, c)) {
        return Ok(Some((saved, Origin::Saved)));
    }
    if let Some(old) = legacy.and_then(|l| normalize(lm, end_ids, l)) {
        return Ok(Some((old, Origin::Legacy)));
    }
    if history.is_empty() {
        return Ok(None);
    }
    let (mut ids, mut header, mut last_answer) = (Vec::new(), 0, None);
    let tok = lm.tokenizer.as_ref();
    for ex in history {
        let turn = lm.user_turn(&ids, header, setting.system, setting.thinking, &ex.user)?;
        ids = turn.prompt;
        header = turn.header.len();
        last_answer = Some(ids.len());
        if let Some(tok) = tok {
            ids.extend(tok.encode(&ex.answer)?);
        }
    }
    let convo = SavedConvo {
        ids,
        header,
        last_answer,
    };
    Ok(fits(lm, &convo).then_some((convo, Origin::Rebuilt)))
}

/// Whether `c` can be this model's conversation: BOS first, ids in the vocabulary, a header and
/// an answer start inside it.
fn fits(lm: &LoadedModel, c: &SavedConvo) -> bool {
    let cfg = lm.model.config();
    c.ids.first() == Some(&cfg.bos_token_id)
        && c.header < c.ids.len()
        && c.last_answer.is_none_or(|a| a <= c.ids.len())
        && c.ids.iter().all(|&i| (i as usize) < cfg.vocab_size)
}

/// A conversation an earlier release saved, in today's form: those closed the last answer with
/// its end id and ended the header before the first user turn's opening. `None` when it does
/// not fit the model.
fn normalize(lm: &LoadedModel, end_ids: &[u32], old: LegacyConvo) -> Option<SavedConvo> {
    let mut c = SavedConvo {
        ids: old.ids,
        header: old.header,
        last_answer: old.last_answer,
    };
    if !fits(lm, &c) {
        return None;
    }
    if c.ids.len() > 1 + c.header && c.ids.last().is_some_and(|i| end_ids.contains(i)) {
        c.ids.pop();
    }
    let opening = lm.user_turn(&[], 0, None, false, "").ok()?.header;
    let after = c.ids.get(1 + c.header..)?;
    if !opening.is_empty() && after.starts_with(&opening) {
        c.header += opening.len();
    }
    (c.header < c.ids.len()).then_some(c)
}
