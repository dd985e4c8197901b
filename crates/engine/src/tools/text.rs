//! Tool calls and responses in ids ([`ToolText`]), the one writer both a live turn and a
//! conversation rebuilt from its transcript use: a response written as the chat template writes
//! `response:NAME{…}` (its text never able to become a control token) and cut to the room the
//! context leaves, a call as the model wrote it. A rebuilt answer's calls are placed by
//! [`ToolText::answer`] between the stretches of its text.

use gemma_model::tokenizer::Tokenizer;
use gemma_tools::syntax::{self, Piece, ToolResponse};
use serde_json::{Map, Value};

use super::ToolIds;
use crate::protocol::{CallMade, CallResponse};

/// Tokens kept free for the answer after the tools' responses.
pub(crate) const ANSWER_ROOM: usize = 64;

/// A vocabulary's tool markers and how it spells text without control tokens.
#[derive(Debug, Clone)]
pub struct ToolText {
    /// The marker ids.
    pub ids: ToolIds,
    /// Which ids are control tokens (never produced from a tool's text).
    control: Vec<bool>,
    /// The byte-fallback id of each byte, where the vocabulary has one.
    byte_ids: Vec<Option<u32>>,
}

impl ToolText {
    /// `tok`'s, when its vocabulary has the tool markers (Gemma 4's does).
    pub fn of(tok: &Tokenizer) -> Option<Self> {
        // The markers first: a vocabulary without them (Gemma 3) is not read whole for nothing.
        ToolIds::of(tok)?;
        Self::with_bytes(tok, &tok.vocab_bytes())
    }

    /// [`ToolText::of`] with `tok`'s vocabulary as bytes already read.
    pub fn with_bytes(tok: &Tokenizer, bytes: &[Option<Vec<u8>>]) -> Option<Self> {
        let ids = ToolIds::of(tok)?;
        let control = bytes.iter().map(Option::is_none).collect();
        let byte_ids = (0..=255u8)
            .map(|b| tok.token_id(&format!("<0x{b:02X}>")))
            .collect();
        Some(Self {
            ids,
            control,
            byte_ids,
        })
    }

    /// `text` in ids with no control token: where the tokenizer matched one (a tool's text
    /// that holds `<turn|>`, say), its text is spelled in byte tokens instead (or dropped where
    /// the vocabulary has none), so that nothing a tool returns can steer the conversation.
    pub fn plain(&self, tok: &Tokenizer, text: &str) -> Vec<u32> {
        let ids = tok.encode(text).unwrap_or_default();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if !self.control.get(id as usize).copied().unwrap_or(true) {
                out.push(id);
                continue;
            }
            let piece = tok.token(id).unwrap_or_default();
            out.extend(piece.bytes().filter_map(|b| self.byte_ids[b as usize]));
        }
        out
    }

    /// Ids of formatted pieces: text spelled plainly, string delimiters as the `<|"|>` id.
    pub fn pieces(&self, tok: &Tokenizer, pieces: &[Piece]) -> Vec<u32> {
        let mut ids = Vec::new();
        for p in pieces {
            match p {
                Piece::Quote => ids.push(self.ids.quote),
                Piece::Text(t) => ids.extend(self.plain(tok, t)),
            }
        }
        ids
    }

    /// A call as the model wrote it (`written`, its delimiters as `<|"|>`), between its markers.
    pub fn call(&self, tok: &Tokenizer, written: &str) -> Vec<u32> {
        let mut ids = vec![self.ids.call];
        for (i, part) in written.split("<|\"|>").enumerate() {
            if i > 0 {
                ids.push(self.ids.quote);
            }
            ids.extend(self.plain(tok, part));
        }
        ids.push(self.ids.call_end);
        ids
    }

    /// The responses of one hand-over as the model reads them after the `<|tool_response>` it
    /// sampled, within `room` tokens shared evenly: each later block opens with its own
    /// `<|tool_response>`, each ends with `<tool_response|>`; a response that does not fit is
    /// cut, and says so. `None` responses (the turn ended before them) write nothing.
    pub fn responses(
        &self,
        tok: &Tokenizer,
        responses: &[(&str, Option<&ToolResponse>)],
        room: usize,
    ) -> Vec<u32> {
        let share = room / responses.len().max(1);
        let mut ids = Vec::new();
        for (i, (name, response)) in responses.iter().enumerate() {
            let Some(response) = response else { continue };
            if i > 0 {
                ids.push(self.ids.response);
            }
            ids.extend(self.fitted(tok, name, response, share.saturating_sub(1)));
            ids.push(self.ids.response_end);
        }
        ids
    }

    /// One response's ids within `room` tokens: its text cut shorter (with a note) until it fits.
    fn fitted(
        &self,
        tok: &Tokenizer,
        name: &str,
        response: &ToolResponse,
        room: usize,
    ) -> Vec<u32> {
        let mut response = response.clone();
        for _ in 0..6 {
            let ids = self.pieces(tok, &syntax::response_pieces(name, &response));
            if ids.len() <= room {
                return ids;
            }
            let text = syntax::format_value(&match &response {
                ToolResponse::Text(t) => Value::String(t.clone()),
                ToolResponse::Object(m) => Value::Object(m.clone()),
            });
            let keep = text.len() * room / ids.len().max(1) * 3 / 4;
            let mut cut = keep.min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            response = ToolResponse::Text(format!(
                "{}\n[cut: the context is full; {} of {} bytes shown]",
                &text[..cut],
                cut,
                text.len()
            ));
        }
        let note = ToolResponse::Text("[the response does not fit in the context]".into());
        self.pieces(tok, &syntax::response_pieces(name, &note))
    }

    /// An answer rebuilt from its text and the calls it made, appended to `ids`: its text up to
    /// each hand-over, the hand-over's calls as written, the `<|tool_response>` the model
    /// sampled and the responses fitted as the live turn fitted them (`limit`: the context's
    /// tokens), then the rest of the text. A call that came as JSON (a server's, an API
    /// client's) is written as the chat template writes one; a call whose arguments are not an
    /// object is left out, and how many were is returned.
    pub fn answer(
        &self,
        tok: &Tokenizer,
        ids: &mut Vec<u32>,
        answer: &str,
        calls: &[CallMade],
        limit: usize,
    ) -> crate::error::Result<usize> {
        let written: Vec<CallMade> = calls.iter().filter_map(in_syntax).collect();
        let left_out = calls.len() - written.len();
        let (parts, tail) = crate::protocol::hand_overs(answer, &written);
        for (text, batch) in parts {
            ids.extend(tok.encode(text)?);
            for c in batch {
                ids.extend(self.call(tok, &c.written));
            }
            ids.push(self.ids.response);
            let room = limit.saturating_sub(ids.len() + 1 + ANSWER_ROOM);
            let read: Vec<Option<ToolResponse>> = batch
                .iter()
                .map(|c| c.response.as_ref().map(read))
                .collect();
            let named: Vec<(&str, Option<&ToolResponse>)> = batch
                .iter()
                .zip(&read)
                .map(|(c, r)| (c.name.as_str(), r.as_ref()))
                .collect();
            ids.extend(self.responses(tok, &named, room));
        }
        ids.extend(tok.encode(tail)?);
        Ok(left_out)
    }
}

/// `c` with its call in the model's syntax: as written, or written from its JSON arguments
/// (`None` when they are not an object).
fn in_syntax(c: &CallMade) -> Option<CallMade> {
    if !c.written.is_empty() {
        return Some(c.clone());
    }
    let args = serde_json::from_str::<Map<String, Value>>(&c.arguments).ok()?;
    Some(CallMade {
        written: syntax::format_call(&c.name, &args),
        ..c.clone()
    })
}

/// The response the model read, from what the transcript keeps.
pub fn read(r: &CallResponse) -> ToolResponse {
    let object = r
        .structured
        .as_deref()
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok());
    match object {
        Some(m) => ToolResponse::Object(m),
        None => ToolResponse::Text(r.text.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> Tokenizer {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny_chat_gemma4/tokenizer.json");
        Tokenizer::from_file(&path).expect("tokenizer")
    }

    fn call(at: usize, handover: usize, text: Option<&str>) -> CallMade {
        CallMade {
            name: "f".into(),
            arguments: r#"{"a":"x"}"#.into(),
            written: "call:f{a:<|\"|>x<|\"|>}".into(),
            at,
            handover,
            response: text.map(|t| CallResponse {
                text: t.into(),
                structured: None,
            }),
        }
    }

    fn written(calls: &[CallMade], answer: &str) -> String {
        let tok = tok();
        let text = ToolText::of(&tok).expect("Gemma 4 markers");
        let mut ids = Vec::new();
        let left = text.answer(&tok, &mut ids, answer, calls, 10_000);
        assert_eq!(left.expect("writes"), 0);
        tok.decode(&ids, false).expect("decodes")
    }

    #[test]
    fn an_answer_is_written_again_with_its_calls_where_they_were_made() {
        const CALL: &str = "<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>";
        let r = |t: &str| format!("response:f{{value:<|\"|>{t}<|\"|>}}<tool_response|>");
        // One hand-over of two calls, then another at the same place: the second opens with
        // the `<|tool_response>` the model sampled after its own call.
        let calls = [
            call(6, 0, Some("one")),
            call(6, 0, Some("two")),
            call(6, 1, Some("three")),
        ];
        let got = written(&calls, "Let me see.");
        let want = format!(
            "Let me{CALL}{CALL}<|tool_response>{}<|tool_response>{}{CALL}<|tool_response>{} see.",
            r("one"),
            r("two"),
            r("three")
        );
        assert_eq!(got, want);
        // A call whose turn ended before its response: the response is not written.
        let got = written(&[call(0, 0, None)], "");
        assert_eq!(got, format!("{CALL}<|tool_response>"));
    }

    #[test]
    fn a_tools_text_never_becomes_a_control_token_and_a_structured_response_stays_an_object() {
        let tok = tok();
        let text = ToolText::of(&tok).expect("Gemma 4 markers");
        let mut c = call(0, 0, Some("<turn|>"));
        let mut ids = Vec::new();
        text.answer(&tok, &mut ids, "", &[c.clone()], 10_000)
            .expect("writes");
        let end = tok.token_id("<turn|>").expect("marker");
        assert!(!ids.contains(&end), "spelled, not the control token");
        c.response = Some(CallResponse {
            text: "ignored".into(),
            structured: Some(r#"{"temp":21}"#.into()),
        });
        let mut ids = Vec::new();
        text.answer(&tok, &mut ids, "", &[c], 10_000)
            .expect("writes");
        let got = tok.decode(&ids, false).expect("decodes");
        assert!(got.contains("response:f{temp:21}"), "{got}");
    }

    #[test]
    fn a_json_call_is_written_in_the_model_s_syntax_and_one_without_an_object_left_out() {
        let tok = tok();
        let text = ToolText::of(&tok).expect("Gemma 4 markers");
        let json = CallMade {
            written: String::new(),
            ..call(3, 0, Some("ok"))
        };
        // As the model writes it: the same ids as the call it wrote itself.
        let mut ids = Vec::new();
        let left = text.answer(&tok, &mut ids, "Yes.", std::slice::from_ref(&json), 10_000);
        assert_eq!(left.expect("writes"), 0);
        let mut same = Vec::new();
        text.answer(&tok, &mut same, "Yes.", &[call(3, 0, Some("ok"))], 10_000)
            .expect("writes");
        assert_eq!(ids, same);
        let broken = CallMade {
            arguments: "[1]".into(),
            ..json
        };
        let mut ids = Vec::new();
        let left = text.answer(&tok, &mut ids, "Yes.", &[broken], 10_000);
        assert_eq!(left.expect("writes"), 1);
        assert_eq!(tok.decode(&ids, false).expect("decodes"), "Yes.");
    }
}
