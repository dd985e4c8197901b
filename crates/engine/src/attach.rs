//! Where an attached tab's conversation comes from ([`conversation`]): what the engine saved for
//! the chat with these weights; else what an earlier release saved in the chat file (brought to
//! today's form); else the transcript's text, rendered turn by turn with the chat template the way
//! the turns were first sent. Every candidate is checked against the model before it is used.

use super::branch::{self, Held, Rendered, Setting};
use super::convo_store::{self, ConvoStore, SavedConvo};
use super::images::{MediaSpan, image_key, key_hex};
use super::protocol::MediaKind;
use super::protocol::{Exchange, LegacyConvo};
use super::tabs::Stores;
use super::tabs::TabState;
use super::worker::Towers;
use crate::error::{Error, Result};
use gemma_model::checkpoint::LoadedModel;

/// Where a conversation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// The engine's own store: exactly the ids the model saw.
    Saved,
    /// A chat file of an earlier release.
    Legacy,
    /// Rebuilt from the transcript's text.
    Rebuilt,
    /// Rebuilt from the transcript's text, without the pictures the saved one held.
    WithoutPictures,
}

/// What the UI asked for (see [`super::protocol::Command::Attach`]), and the model's towers,
/// which a saved conversation's pictures and recordings need.
pub(super) struct Request {
    pub chat: String,
    pub history: Vec<Exchange>,
    pub legacy: Option<LegacyConvo>,
    pub towers: Towers,
    /// The engine's writer of tool calls and responses, when it has one.
    pub text: Option<std::sync::Arc<super::tools::ToolText>>,
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
    // The conversation of the chat the tab leaves is parked on disk, warm for its return.
    if let (Some(kv), Some(_)) = (&stores.kv, &t.chat) {
        let _ = kv.park(&t.convo, &t.session);
    }
    t.chat = Some(r.chat.clone());
    let legacy_ids = r.legacy.as_ref().map(|l| l.ids.clone());
    let setting = Setting::of(&t.settings, r.towers.marks(), t.context).with_text(r.text.clone());
    let store = stores.convos.as_ref();
    let sources = (store, &r.towers);
    let found = conversation(
        lm, end_ids, sources, &r.chat, &r.history, r.legacy, &setting,
    )?;
    let Some((convo, origin, images)) = found else {
        return Ok(None);
    };
    // The exchanges' texts are the transcript's; where they lie in the ids is known for a
    // conversation rebuilt here or saved with them.
    let base = 1 + convo.header;
    let spans_fit = convo.exchanges.len() == r.history.len()
        && convo
            .exchanges
            .iter()
            .all(|&[a, e]| a <= e && base + e <= convo.ids.len())
        && convo
            .exchanges
            .last()
            .is_none_or(|&[_, e]| base + e == convo.ids.len());
    t.held = spans_fit.then(|| {
        r.history
            .iter()
            .zip(&convo.exchanges)
            .map(|(ex, &[answer_start, end])| Held {
                user: ex.user.clone(),
                media: ex.media.clone(),
                answer: ex.answer.clone(),
                calls: ex.calls.clone(),
                answer_start,
                end,
            })
            .collect()
    });
    t.session.reset();
    t.convo = convo.ids;
    t.images = images;
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

/// The conversation for `chat` and where it came from; `None` for a chat with no exchanges.
fn conversation(
    lm: &LoadedModel,
    end_ids: &[u32],
    (store, towers): (Option<&ConvoStore>, &Towers),
    chat: &str,
    history: &[Exchange],
    legacy: Option<LegacyConvo>,
    setting: &Setting,
) -> Result<Option<(SavedConvo, Origin, Vec<MediaSpan>)>> {
    // A saved conversation's pictures are encoded again from their kept copies; one whose
    // pictures cannot be is rebuilt from its text, never fed placeholders without them.
    let saved = store.and_then(|s| s.load(chat)).filter(|c| fits(lm, c));
    let mut had_pictures = false;
    if let (Some(saved), Some(store)) = (saved, store) {
        match pictures_of(&saved, store, towers) {
            Some(images) => return Ok(Some((saved, Origin::Saved, images))),
            None => had_pictures = true,
        }
    }
    if let Some(old) = legacy.and_then(|l| normalize(lm, end_ids, l)) {
        return Ok(Some((old, Origin::Legacy, Vec::new())));
    }
    if history.is_empty() {
        return Ok(None);
    }
    too_long(lm, history)?;
    let mut r = Rendered::default();
    branch::render(lm, &mut r, history, setting)?;
    let convo = SavedConvo {
        last_answer: r.last_answer(),
        exchanges: spans(&r.held),
        ids: r.ids,
        header: r.header,
        pictures: Vec::new(),
    };
    // The transcript's media come back from its files; only those that cannot are missed.
    let origin = if r.left_out > 0 || (had_pictures && r.images.is_empty()) {
        Origin::WithoutPictures
    } else {
        Origin::Rebuilt
    };
    Ok(fits(lm, &convo).then_some((convo, origin, r.images)))
}

/// The pictures and recordings of a saved conversation, in their places but not encoded: their
/// rows come from the store's copies only when a prefill needs them (`Worker::fill_rows`), so a
/// warm re-attach runs no tower. `None` when one cannot come back (no tower for its kind, its
/// kept copy gone or changed, its run of placeholders not where it says) or when they do not
/// cover every placeholder.
fn pictures_of(c: &SavedConvo, store: &ConvoStore, towers: &Towers) -> Option<Vec<MediaSpan>> {
    let marks = towers.marks();
    // Placeholders of the kinds this model takes; a model without a tower held none of its kind.
    let placeholders: Vec<u32> = [marks.image, marks.audio]
        .iter()
        .flatten()
        .map(|m| m[1])
        .collect();
    let held = c.ids.iter().filter(|i| placeholders.contains(i)).count();
    let mut images = Vec::with_capacity(c.pictures.len());
    for p in &c.pictures {
        let kind = if p.audio {
            MediaKind::Audio
        } else {
            MediaKind::Image
        };
        let tower = match kind {
            MediaKind::Image => towers.vision.spec().is_ok(),
            MediaKind::Audio => towers.audio.spec().is_ok(),
        };
        tower.then_some(())?;
        // The copy is the one the conversation was made with (its key is of its bytes).
        let key = image_key(&store.picture(&p.key)?, p.budget);
        (key_hex(&key) == p.key).then_some(())?;
        let [begin, placeholder, end] = marks.of(kind)?;
        (c.ids.get(p.at.checked_sub(1)?) == Some(&begin)).then_some(())?;
        let tokens = c
            .ids
            .get(p.at..)?
            .iter()
            .take_while(|&&i| i == placeholder)
            .count();
        (tokens > 0 && c.ids.get(p.at + tokens) == Some(&end)).then_some(())?;
        images.push(MediaSpan {
            at: p.at,
            rows: Default::default(),
            tokens,
            key,
            budget: p.budget,
            kind,
            source: None,
        });
    }
    let covered: usize = images.iter().map(|i| i.tokens).sum();
    (covered == held).then_some(images)
}

/// Tokens a chat turn's markers take at least (Gemma's `<start_of_turn>user\n` … `<end_of_turn>\n`,
/// both turns of an exchange).
const MIN_EXCHANGE_TOKENS: usize = 8;

/// Refuses, before any rendering, a transcript that cannot fit this model's context: more text
/// than is tokenized at once, or more exchanges than the context has room for. Rebuilding it
/// turn by turn would only keep the engine (and every tab) busy to find that out.
fn too_long(lm: &LoadedModel, history: &[Exchange]) -> Result<()> {
    let bytes: usize = history.iter().map(|e| e.user.len() + e.answer.len()).sum();
    let room = lm.model.config().max_position_embeddings / MIN_EXCHANGE_TOKENS;
    if bytes > gemma_model::tokenizer::MAX_TEXT || history.len() > room {
        return Err(Error::Invalid(format!(
            "this chat ({} exchanges, {:.1} MiB of text) is longer than the model's context of \
             {} tokens can hold: it is shown, but the model does not see it, and the next turn \
             starts the conversation over",
            history.len(),
            bytes as f64 / (1 << 20) as f64,
            lm.model.config().max_position_embeddings
        )));
    }
    Ok(())
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
        exchanges: Vec::new(),
        pictures: Vec::new(),
    };
    if !fits(lm, &c) {
        return None;
    }
    if c.ids.len() > 1 + c.header && c.ids.last().is_some_and(|i| end_ids.contains(i)) {
        c.ids.pop();
    }
    let opening = lm
        .user_turn(&[], 0, None, false, "", &[], None)
        .ok()?
        .header;
    let after = c.ids.get(1 + c.header..)?;
    if !opening.is_empty() && after.starts_with(&opening) {
        c.header += opening.len();
    }
    (c.header < c.ids.len()).then_some(c)
}

/// Where each held exchange's answer starts and ends, as the store keeps them.
pub(super) fn spans(held: &[Held]) -> Vec<[usize; 2]> {
    held.iter().map(|h| [h.answer_start, h.end]).collect()
}
