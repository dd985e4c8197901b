//! The text of an answer as its tokens arrive ([`Reply`]): thought and answer apart (Gemma 4's
//! channels), whole characters only, and the answer held back where it may become a stop string.
//! Every front end that streams an answer (the engine thread, the line chat, `generate`) reads
//! it through this one type.

use super::stop_strings;
use super::thinking::{self, Channels, Route, Router};
use crate::error::Result;
use gemma_model::tokenizer::Tokenizer;
use gemma_model::tokenizer::stream::TextStream;

/// Text to show, from one token or the end of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// More answer text.
    Answer(String),
    /// More thought text (without the channel's name line).
    Thought(String),
}

/// One answer's text state.
#[derive(Debug)]
pub struct Reply {
    channels: Option<Channels>,
    router: Router,
    answer: TextStream,
    thought: TextStream,
    /// Whether the thought's channel name line is still being skipped.
    naming: bool,
    /// Answer text not shown yet (it may be the start of a stop string).
    pending: String,
    /// Bytes of answer text shown so far.
    shown: usize,
    stop_strings: Vec<String>,
}

impl Reply {
    /// An empty reply for a vocabulary with `channels` (`None`: every token is answer), ending
    /// at any of `stop_strings`.
    pub fn new(channels: Option<Channels>, stop_strings: Vec<String>) -> Self {
        Self {
            channels,
            router: Router::new(channels),
            answer: TextStream::new(),
            thought: TextStream::new(),
            naming: true,
            pending: String::new(),
            shown: 0,
            stop_strings,
        }
    }

    /// Whether the answer opened or closed a thought channel.
    pub fn thought_seen(&self) -> bool {
        self.router.seen
    }

    /// Takes the next answer token: the text it lets show (none while it may be part of a stop
    /// string), and whether a stop string is now complete (the answer ends before it).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<(Option<Piece>, bool)> {
        match self.router.route(id) {
            Route::Marker => Ok((None, false)),
            Route::Thought => {
                let piece = self.thought.push(tok, id)?;
                let text = thinking::skip_channel_name(&piece, &mut self.naming);
                Ok(((!text.is_empty()).then_some(Piece::Thought(text)), false))
            }
            Route::Answer => {
                let delta = self.answer.push(tok, id)?;
                self.pending.push_str(&delta);
                let (show, stop_at) = stop_strings::scan(&self.pending, &self.stop_strings);
                let text: String = self.pending.drain(..show).collect();
                self.shown += text.len();
                let piece = (!text.is_empty()).then_some(Piece::Answer(text));
                Ok((piece, stop_at.is_some()))
            }
        }
    }

    /// The answer text still held back, at the end of an answer that did not end at a stop
    /// string.
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<Option<Piece>> {
        self.pending.push_str(&self.answer.finish(tok)?);
        let text = std::mem::take(&mut self.pending);
        self.shown += text.len();
        Ok((!text.is_empty()).then_some(Piece::Answer(text)))
    }

    /// Starts the text over after tool responses (once [`Reply::finish`] has shown what was
    /// held back): stop strings are looked for in the text that follows; the channel state
    /// stays.
    pub fn restart(&mut self) {
        self.answer = TextStream::new();
        self.thought = TextStream::new();
        self.pending.clear();
        self.shown = 0;
    }

    /// How many of `answer`'s tokens made only the text that was shown: where the answer is cut
    /// when a stop string ended it (the tokens that made the stop string are dropped).
    pub fn kept_tokens(&self, tok: &Tokenizer, answer: &[u32]) -> Result<usize> {
        let shown = |ids: &[u32]| -> Result<usize> {
            let text = match self.channels {
                Some(ch) => thinking::strip(ids, ch),
                None => ids.to_vec(),
            };
            Ok(tok.decode(&text, true)?.len())
        };
        let mut keep = answer.len();
        while keep > 0 && shown(&answer[..keep])? > self.shown {
            keep -= 1;
        }
        Ok(keep)
    }
}
