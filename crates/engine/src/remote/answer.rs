//! A turn's streamed answer, bounded: the body read a piece at a time, each piece framed
//! ([`super::sse`], linear, lines capped) and parsed ([`wire::parse`]) as it comes. A budget
//! from the request's `max_tokens` caps the bytes and the text (tool calls' pieces included) a
//! server may send for one answer; an answer that brings no news (text, progress, its end) for
//! the idle time-out fails; the API key, should the server echo it, is replaced in the text
//! before anyone sees it ([`Redactor`]).

use std::collections::VecDeque;
use std::time::Instant;

use super::client::{Client, RemoteError};
pub use super::limits::MAX_LINE;
use super::sse::Framer;
use super::wire::{self, Piece};

/// What an echoed API key is replaced with.
pub const REDACTED: &str = "[API key]";

/// Shortest API key that is taken out of answers and messages ([`Client::secret`]).
pub const MIN_SECRET: usize = 8;

/// What one answer may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes on the wire, framing and keep-alives included.
    pub bytes: usize,
    /// Bytes of answer and thought text.
    pub text: usize,
}

impl Budget {
    /// The budget of an answer of at most `max_tokens` tokens: no token is longer than 128
    /// bytes of text, and no chunk of the API carries more than 4 KiB around one.
    pub fn for_tokens(max_tokens: usize) -> Self {
        let tokens = max_tokens.max(1);
        Self {
            bytes: tokens.saturating_mul(4 << 10).saturating_add(16 << 20),
            text: tokens.saturating_mul(128).saturating_add(64 << 10),
        }
    }
}

/// A streamed answer: [`Answer::next`] until `None`.
pub struct Answer {
    client: Client,
    response: reqwest::Response,
    framer: Framer,
    budget: Budget,
    /// Bytes and text received so far.
    bytes: usize,
    text: usize,
    /// Parsed events not yet taken, and the error after them, if the stream broke.
    ready: VecDeque<Result<Vec<Piece>, RemoteError>>,
    ended: bool,
    last_news: Instant,
}

impl Answer {
    pub(super) fn new(client: Client, response: reqwest::Response, budget: Budget) -> Self {
        Self {
            client,
            response,
            framer: Framer::new(MAX_LINE),
            budget,
            bytes: 0,
            text: 0,
            ready: VecDeque::new(),
            ended: false,
            last_news: Instant::now(),
        }
    }

    /// The next event's pieces (`None`: the body ended). After an error the stream is over.
    pub async fn next(&mut self) -> Result<Option<Vec<Piece>>, RemoteError> {
        loop {
            if let Some(p) = self.ready.pop_front() {
                if p.is_err() {
                    self.ended = true;
                    self.ready.clear();
                }
                return p.map(Some);
            }
            if self.ended {
                return Ok(None);
            }
            let left = self.client.idle().saturating_sub(self.last_news.elapsed());
            let chunk = tokio::time::timeout(left, self.response.chunk())
                .await
                .map_err(|_| self.client.stalled())?
                .map_err(|e| self.client.dropped(&e))?;
            let (data, broke) = match chunk {
                Some(bytes) => {
                    self.bytes += bytes.len();
                    if self.bytes > self.budget.bytes {
                        return Err(self.too_much(format!(
                            "over {} MiB for one answer",
                            self.budget.bytes >> 20
                        )));
                    }
                    self.framer.push(&bytes)
                }
                None => {
                    self.ended = true;
                    match self.framer.finish() {
                        Ok(last) => (last.into_iter().collect(), None),
                        Err(e) => (Vec::new(), Some(e)),
                    }
                }
            };
            for d in data {
                if !self.take(&d) {
                    break;
                }
            }
            if let Some(e) = broke {
                self.ready.push_back(Err(self.wire(e.into())));
            }
        }
    }

    /// One event's data into the queue, counted; false when it is an error (queued last).
    fn take(&mut self, data: &str) -> bool {
        let pieces = match wire::parse(data) {
            Ok(p) => p,
            Err(e) => {
                self.ready.push_back(Err(self.wire(e)));
                return false;
            }
        };
        if pieces.is_empty() {
            return true;
        }
        self.last_news = Instant::now();
        for p in &pieces {
            match p {
                Piece::Answer(t) | Piece::Thought(t) => self.text += t.len(),
                Piece::ToolCall(d) => self.text += d.len(),
                _ => {}
            }
        }
        if self.text > self.budget.text {
            let e = self.too_much(format!(
                "more text than the answer's token limit allows ({} KiB)",
                self.budget.text >> 10
            ));
            self.ready.push_back(Err(e));
            return false;
        }
        self.ready.push_back(Ok(pieces));
        true
    }

    fn too_much(&self, what: String) -> RemoteError {
        RemoteError::TooMuch {
            url: self.client.url().to_string(),
            what,
        }
    }

    fn wire(&self, error: wire::WireError) -> RemoteError {
        RemoteError::Wire {
            url: self.client.url().to_string(),
            error: match error {
                wire::WireError::Server(m) => wire::WireError::Server(self.client.scrub(&m)),
                e => e,
            },
        }
    }
}

/// Replaces a secret in text that comes in pieces: text that may be the start of the secret is
/// held back until the next piece (or the end) tells.
#[derive(Debug, Default)]
pub struct Redactor {
    secret: Option<String>,
    held: String,
}

impl Redactor {
    /// A redactor of `secret` (none: text passes as it is; see [`Client::secret`]).
    pub fn new(secret: Option<&str>) -> Self {
        Self {
            secret: secret.map(str::to_string),
            held: String::new(),
        }
    }

    /// The text that can be shown now, given the next piece.
    pub fn push(&mut self, piece: String) -> String {
        let Some(secret) = &self.secret else {
            return piece;
        };
        self.held.push_str(&piece);
        if self.held.contains(secret.as_str()) {
            self.held = self.held.replace(secret.as_str(), REDACTED);
        }
        // Hold back the longest tail that could begin the secret.
        let keep = (1..secret.len().min(self.held.len() + 1))
            .rev()
            .find(|&n| {
                self.held.is_char_boundary(self.held.len() - n)
                    && secret.starts_with(&self.held[self.held.len() - n..])
            })
            .unwrap_or(0);
        let tail = self.held.split_off(self.held.len() - keep);
        std::mem::replace(&mut self.held, tail)
    }

    /// What is held back, at the end.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_split_across_pieces_is_replaced() {
        let mut r = Redactor::new(Some("sk-12345"));
        let pieces = ["your key is sk", "-12", "345, and sk-1 is not", " it. sk-"];
        let shown: String = pieces
            .iter()
            .map(|p| r.push(p.to_string()))
            .collect::<String>()
            + &r.finish();
        assert_eq!(shown, "your key is [API key], and sk-1 is not it. sk-");
        let mut r = Redactor::new(None);
        assert_eq!(r.push("sk-12345".into()), "sk-12345");
        let mut r = Redactor::new(Some("key-é123"));
        assert_eq!(
            r.push("a key-é".into()) + &r.push("123b".into()) + &r.finish(),
            "a [API key]b"
        );
    }

    #[test]
    fn the_budget_grows_with_the_answer_length() {
        let small = Budget::for_tokens(16);
        let large = Budget::for_tokens(32_768);
        assert!(small.text < large.text && small.bytes < large.bytes);
        assert!(large.bytes < 200 << 20, "{large:?}");
        assert_eq!(Budget::for_tokens(usize::MAX).text, usize::MAX);
    }
}
