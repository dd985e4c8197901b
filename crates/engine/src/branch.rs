//! A tab's conversation as a list of exchanges in ids ([`Held`]), and moving it to another path of
//! the UI's conversation tree ([`rebase`]): the exchanges the new path shares with the one held
//! keep their ids exactly (the sampled answers included), the rest are rendered turn by turn with
//! the chat template the way they were first sent, their pictures and recordings in their places,
//! their answers' tool calls and responses where they were made ([`render`]). The session is
//! left alone: the next turn rewinds it to the longest common prefix.

use std::sync::Arc;

use super::images::MediaSpan;
use super::pictures::{Encoded, Marks, expand};
use super::protocol::{Attachment, CallMade, Exchange, MediaKind};
use super::tools::ToolText;
use super::tools::text::ANSWER_ROOM;
use crate::error::Result;
use gemma_model::checkpoint::LoadedModel;

/// One exchange the engine holds: its texts as the UI shows them, and where its answer starts and
/// ends in the conversation's ids, counted from the first exchange (after BOS and the header, so
/// that a new header does not move them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Held {
    pub user: String,
    /// The pictures and recordings sent with it.
    pub media: Vec<Attachment>,
    pub answer: String,
    /// The tool calls the answer made.
    pub calls: Vec<CallMade>,
    pub answer_start: usize,
    pub end: usize,
}

impl Held {
    /// Whether `ex` is this exchange (the UI keeps the user's text without trailing blanks).
    fn is(&self, ex: &Exchange) -> bool {
        self.user.trim_end() == ex.user.trim_end()
            && self.answer == ex.answer
            && self.media == ex.media
            && self.calls == ex.calls
    }

    /// Whether `ex` is this exchange with the responses to the calls its answer ended at (a
    /// hand-over a front end answers itself): the same text and calls, each call that had no
    /// response now with one, and nothing after them.
    fn answered_by(&self, ex: &Exchange) -> bool {
        let same_call = |h: &CallMade, e: &CallMade| {
            (&h.name, &h.arguments, &h.written, h.at, h.handover)
                == (&e.name, &e.arguments, &e.written, e.at, e.handover)
                && (h.response.is_none() || h.response == e.response)
        };
        let open = self.calls.iter().any(|c| c.response.is_none());
        open && self.user.trim_end() == ex.user.trim_end()
            && self.answer == ex.answer
            && self.media == ex.media
            && self.calls.len() == ex.calls.len()
            && self
                .calls
                .iter()
                .zip(&ex.calls)
                .all(|(h, e)| same_call(h, e))
            && ex.calls.iter().all(|c| c.response.is_some())
            && self.calls.last().is_some_and(|c| c.at == self.answer.len())
    }

    /// The exchange it holds.
    pub fn exchange(&self) -> Exchange {
        Exchange {
            user: self.user.clone(),
            media: self.media.clone(),
            answer: self.answer.clone(),
            calls: self.calls.clone(),
        }
    }
}

/// What the tab talks to the model in.
pub(super) struct Setting<'a> {
    pub system: Option<&'a str>,
    pub thinking: bool,
    /// The marks of the media this model takes (none of a kind: no tower for it).
    pub marks: Marks,
    /// The tab's context in tokens (tool responses are fitted to it as the live turn fitted
    /// them).
    pub context: usize,
    /// The tools declared in the header (`None`: none, or the next turn declares them).
    pub tools: Option<serde_json::Value>,
    /// The engine's writer of tool calls and responses, when it has one (else it is read from
    /// the vocabulary when an answer with calls needs it).
    pub text: Option<Arc<ToolText>>,
}

impl<'a> Setting<'a> {
    /// A tab's, with `settings` and a context of `context` tokens, on a model whose media are
    /// marked by `marks`.
    pub fn of(settings: &'a super::protocol::TabSettings, marks: Marks, context: usize) -> Self {
        Self {
            system: settings.system_prompt(),
            thinking: settings.thinking,
            marks,
            context,
            tools: None,
            text: None,
        }
    }

    /// With the engine's writer of tool calls and responses.
    pub fn with_text(self, text: Option<Arc<ToolText>>) -> Self {
        Self { text, ..self }
    }

    /// With `tools` declared in the header, as the tab's next turn declares them: a path
    /// rendered for a turn that goes on from it (`Command::Continue`) is that turn's.
    pub fn with_tools(self, tools: Option<serde_json::Value>) -> Self {
        Self { tools, ..self }
    }
}

/// A conversation in ids with its exchanges.
#[derive(Debug, Default)]
pub(super) struct Rendered {
    pub ids: Vec<u32>,
    /// Header ids after BOS.
    pub header: usize,
    pub held: Vec<Held>,
    /// The pictures and recording pieces rendered here, in their places, their rows pending.
    pub images: Vec<MediaSpan>,
    /// Pictures and recordings left out: no tower for their kind, or their file unreadable.
    pub left_out: usize,
    /// Tool calls left out: this model writes no calls, or their arguments are not an object.
    pub calls_left_out: usize,
    /// Set when the checkpoint's template failed and the built-in layout stood in.
    pub template_error: Option<gemma_model::tokenizer::template::TemplateError>,
}

impl Rendered {
    /// Where the last answer starts in `ids`.
    pub fn last_answer(&self) -> Option<usize> {
        self.held.last().map(|h| 1 + self.header + h.answer_start)
    }
}

/// Appends `exchanges` to `into`, each user turn rendered with the chat template after what is
/// there, its pictures and recordings in their places, their rows pending (see
/// [`super::pictures::unencoded`], [`super::sounds::unencoded`]), and its answer tokenized.
pub(super) fn render(
    lm: &LoadedModel,
    into: &mut Rendered,
    exchanges: &[Exchange],
    setting: &Setting,
) -> Result<()> {
    let tok = lm.tokenizer.as_ref();
    // The engine's, or read once, and only when an answer called tools.
    let mut tool_text: Option<Option<Arc<ToolText>>> = setting.text.clone().map(Some);
    for ex in exchanges {
        let placed = placeable(ex, setting.marks, &mut into.left_out);
        let turn = lm.user_turn(
            &into.ids,
            into.header,
            setting.system,
            setting.thinking,
            &ex.user,
            &super::pictures::media(&placed),
            setting.tools.as_ref(),
        )?;
        if into.template_error.is_none() {
            into.template_error = turn.template_error;
        }
        let from = 1 + turn.header.len() + into.ids.len().saturating_sub(1 + into.header);
        let (ids, spans) = expand(&turn.prompt, from, &setting.marks, &placed)?;
        into.ids = ids;
        into.images.extend(spans);
        into.header = turn.header.len();
        let base = 1 + into.header;
        let answer_start = into.ids.len() - base;
        if let Some(tok) = tok {
            let text = match ex.calls.is_empty() {
                true => None,
                false => tool_text
                    .get_or_insert_with(|| ToolText::of(tok).map(Arc::new))
                    .as_deref(),
            };
            match text {
                Some(text) => {
                    let limit = setting.context;
                    let n = text.answer(tok, &mut into.ids, &ex.answer, &ex.calls, limit)?;
                    into.calls_left_out += n;
                }
                None => {
                    into.ids.extend(tok.encode(&ex.answer)?);
                    into.calls_left_out += ex.calls.len();
                }
            }
        }
        into.held.push(Held {
            user: ex.user.clone(),
            media: ex.media.clone(),
            answer: ex.answer.clone(),
            calls: ex.calls.clone(),
            answer_start,
            end: into.ids.len() - base,
        });
    }
    Ok(())
}

/// The pictures and recording pieces of `ex` this model can place, counting in `left_out` those
/// it cannot (no tower for their kind, a file gone or unreadable).
fn placeable(ex: &Exchange, marks: Marks, left_out: &mut usize) -> Vec<Encoded> {
    let mut out = Vec::new();
    for a in &ex.media {
        let placed = match a.kind {
            _ if marks.of(a.kind).is_none() => None,
            MediaKind::Image => super::pictures::unencoded(&a.path, a.tokens)
                .map(|e| vec![e])
                .ok(),
            MediaKind::Audio => super::sounds::unencoded(&a.path).ok(),
        };
        match placed {
            Some(pieces) => out.extend(pieces),
            None => *left_out += 1,
        }
    }
    out
}

/// The conversation that follows `path`, from the one held (`ids` with a header of `header`
/// ids; `held` its exchanges, `None` when they are not known): the leading exchanges both share
/// are kept as they are, the rest rendered.
pub(super) fn rebase(
    lm: &LoadedModel,
    ids: &[u32],
    header: usize,
    held: Option<&[Held]>,
    path: &[Exchange],
    setting: &Setting,
) -> Result<Rendered> {
    let held = held.unwrap_or_default();
    let shared = held
        .iter()
        .zip(path)
        .take_while(|(h, ex)| h.is(ex) && 1 + header + h.end <= ids.len())
        .count();
    let mut out = Rendered::default();
    if shared > 0 {
        out.ids = ids[..1 + header + held[shared - 1].end].to_vec();
        out.header = header;
        out.held = held[..shared].to_vec();
    }
    let mut rest = &path[shared..];
    // The next exchange ended at calls the front end answered: its ids stay as they were
    // sampled, the responses after them.
    if let (Some(h), Some(ex)) = (held.get(shared), rest.first())
        && 1 + header + h.end <= ids.len()
        && h.answered_by(ex)
        && let Some(tok) = lm.tokenizer.as_ref()
        && let Some(text) = setting
            .text
            .clone()
            .or_else(|| ToolText::of(tok).map(Arc::new))
    {
        out.ids = ids[..1 + header + h.end].to_vec();
        out.header = header;
        out.held.truncate(shared);
        answered(&mut out, (tok, &text), h, ex, setting.context);
        rest = &rest[1..];
    }
    render(lm, &mut out, rest, setting)?;
    Ok(out)
}

/// Appends to `out` the responses `ex` gives to the calls held exchange `h` ended at, fitted to
/// a context of `context` tokens as the live turn fits them, and `ex` as its exchange.
fn answered(
    out: &mut Rendered,
    (tok, text): (&gemma_model::tokenizer::Tokenizer, &ToolText),
    h: &Held,
    ex: &Exchange,
    context: usize,
) {
    let last = ex.calls.last().map_or(0, |c| c.handover);
    let batch: Vec<&CallMade> = ex.calls.iter().filter(|c| c.handover == last).collect();
    let read: Vec<_> = batch
        .iter()
        .map(|c| c.response.as_ref().map(super::tools::text::read))
        .collect();
    let named: Vec<_> = batch
        .iter()
        .zip(&read)
        .map(|(c, r)| (c.name.as_str(), r.as_ref()))
        .collect();
    let room = context.saturating_sub(out.ids.len() + 1 + ANSWER_ROOM);
    out.ids.extend(text.responses(tok, &named, room));
    out.held.push(Held {
        calls: ex.calls.clone(),
        end: out.ids.len() - 1 - out.header,
        ..h.clone()
    });
}

/// How many leading ids `a` and `b` share.
pub(super) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
