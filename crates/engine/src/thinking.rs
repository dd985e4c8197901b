//! Gemma 4 thinking: which answer tokens are thought and which are answer, and what the `strip`
//! policy keeps of a finished answer. The model writes `<|channel>thought\n…<channel|>answer`; the
//! channel markers are control tokens, so the split happens in token space, not on text.

use gemma_model::tokenizer::Tokenizer;

/// What happens to a turn's thought once the turn is over (the protocol's: the config names it).
pub use gemma_protocol::ThinkingPolicy;

/// The ids of the channel markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channels {
    /// `<|channel>`.
    pub open: u32,
    /// `<channel|>`.
    pub close: u32,
}

impl Channels {
    /// The markers of `tok`'s vocabulary, when it has them (Gemma 4 does, Gemma 3 does not).
    pub fn of(tok: &Tokenizer) -> Option<Self> {
        Some(Self {
            open: tok.token_id("<|channel>")?,
            close: tok.token_id("<channel|>")?,
        })
    }
}

/// Where one generated token belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A channel marker: shown nowhere.
    Marker,
    /// Inside a thought channel (its name first, e.g. `thought\n`).
    Thought,
    /// The answer.
    Answer,
}

/// Follows the channel markers through a stream of generated ids.
#[derive(Debug, Clone, Default)]
pub struct Router {
    channels: Option<Channels>,
    inside: bool,
    /// Whether any marker was seen this turn.
    pub seen: bool,
}

impl Router {
    /// A router for a vocabulary with `channels` (`None`: everything is answer).
    pub fn new(channels: Option<Channels>) -> Self {
        Self {
            channels,
            ..Self::default()
        }
    }

    /// Where `id` goes.
    pub fn route(&mut self, id: u32) -> Route {
        let Some(ch) = self.channels else {
            return Route::Answer;
        };
        if id == ch.open {
            self.inside = true;
            self.seen = true;
            Route::Marker
        } else if id == ch.close {
            self.inside = false;
            self.seen = true;
            Route::Marker
        } else if self.inside {
            Route::Thought
        } else {
            Route::Answer
        }
    }
}

/// `answer` without its channel blocks (an unclosed one runs to the end), as the template renders
/// a model turn in history.
pub fn strip(answer: &[u32], ch: Channels) -> Vec<u32> {
    let mut router = Router::new(Some(ch));
    answer
        .iter()
        .copied()
        .filter(|&id| router.route(id) == Route::Answer)
        .collect()
}

/// Drops a thought channel's name line (`thought\n`) from the front of streamed thought text.
/// `naming` is true until the line has ended.
pub fn skip_channel_name(text: &str, naming: &mut bool) -> String {
    if !*naming {
        return text.to_string();
    }
    match text.find('\n') {
        Some(at) => {
            *naming = false;
            text[at + 1..].to_string()
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: Channels = Channels {
        open: 100,
        close: 101,
    };

    #[test]
    fn tokens_are_routed_by_the_channel_markers() {
        let mut r = Router::new(Some(CH));
        let routes: Vec<Route> = [7, 100, 8, 9, 101, 10].map(|id| r.route(id)).to_vec();
        assert_eq!(
            routes,
            [
                Route::Answer,
                Route::Marker,
                Route::Thought,
                Route::Thought,
                Route::Marker,
                Route::Answer
            ]
        );
        assert!(r.seen);
        let mut plain = Router::new(None);
        assert_eq!(plain.route(100), Route::Answer);
    }

    #[test]
    fn strip_keeps_only_the_answer() {
        assert_eq!(strip(&[100, 5, 6, 101, 7, 8], CH), vec![7, 8]);
        assert_eq!(strip(&[7, 100, 5, 101, 8, 100, 9, 101], CH), vec![7, 8]);
        assert_eq!(strip(&[100, 5, 6], CH), Vec::<u32>::new());
        assert_eq!(strip(&[1, 2], CH), vec![1, 2]);
    }

    #[test]
    fn the_channel_name_line_is_skipped_across_pieces() {
        let mut naming = true;
        assert_eq!(skip_channel_name("thou", &mut naming), "");
        assert_eq!(skip_channel_name("ght\nLet me", &mut naming), "Let me");
        assert_eq!(skip_channel_name(" think", &mut naming), " think");
    }
}
