//! What a new user turn adds to a conversation, as the chat template writes it. The history stays
//! in token ids (answers exactly as sampled), so only the new text is rendered: the template runs
//! on a conversation of the same shape whose earlier messages are placeholders, and the text after
//! the last earlier answer is the new turn (the closing of that answer, the user's turn and the
//! opening of the model's). The text before the first user message is the conversation's header
//! (system turn, thinking switch, tool declarations); when it changes, the engine rewinds to it.

use std::ops::Range;

use serde_json::json;

use super::{ChatTemplate, TemplateError, TemplateSource};

/// The conversation a new turn joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversation<'a> {
    /// The system prompt, if any.
    pub system: Option<&'a str>,
    /// Gemma 4 thinking on for this turn.
    pub thinking: bool,
    /// Whether earlier exchanges (a user message and an answer) come before this turn.
    pub continues: bool,
    /// Pictures and recordings in this turn's message, in order, before its text (the template
    /// writes `<|image|>` or `<|audio|>` for each, as transformers' `{"type": "image"}` and
    /// `{"type": "audio"}` content items).
    pub media: &'a [Media],
    /// The tools the model may call, as transformers' `apply_chat_template(tools=…)` takes them
    /// (a list of `{"type": "function", "function": {…}}`): Gemma 4's templates declare them
    /// in the system turn, so they are part of the header.
    pub tools: Option<&'a serde_json::Value>,
}

/// A content item of a user message besides its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// A picture (`<|image|>`).
    Image,
    /// A recording, or one 30-second piece of one (`<|audio|>`).
    Audio,
}

impl Media {
    fn item(self) -> serde_json::Value {
        match self {
            Media::Image => json!({"type": "image"}),
            Media::Audio => json!({"type": "audio"}),
        }
    }
}

/// A new user turn's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnText {
    /// Between BOS and the first user message's content: the system turn, the thinking switch
    /// and the opening of the first user turn.
    pub header: String,
    /// What the turn adds after the header (first turn) or after the last answer (later turns):
    /// the user's message and the opening of the model's turn.
    pub turn: String,
    /// Where `header` holds the system prompt as the template wrote it (bytes), if it does.
    pub system: Option<Range<usize>>,
    /// Where `turn` holds the user's message as the template wrote it (bytes): text the user
    /// wrote, in which no control token may be read.
    pub user: Range<usize>,
}

/// Where `real` holds what `shaped` (the same render with `mark` in its place) has as `mark`:
/// the text before and after it is the template's own. When the template changed the mark, the
/// stretch between what the two renders share at their start and at their end.
fn written_at(real: &str, shaped: &str, mark: &str) -> Range<usize> {
    let (r, s) = (real.as_bytes(), shaped.as_bytes());
    if let Some(k) = shaped.find(mark) {
        let after = &s[k + mark.len()..];
        if r.len() >= k + after.len() && r[..k] == s[..k] && r.ends_with(after) {
            return k..r.len() - after.len();
        }
    }
    let prefix = r.iter().zip(s).take_while(|(a, b)| a == b).count();
    let suffix = r
        .iter()
        .rev()
        .zip(s.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let end = r.len() - suffix.min(r.len());
    prefix.min(end)..prefix.max(end)
}

/// `range` of a text moved `by` bytes to the left and cut to `len`.
fn shifted(range: Range<usize>, by: usize, len: usize) -> Range<usize> {
    range.start.saturating_sub(by).min(len)..range.end.saturating_sub(by).min(len)
}

/// A placeholder message that no template changes (private-use characters, no whitespace).
fn mark(i: usize) -> String {
    format!("\u{E000}{i}\u{E001}")
}

/// The messages of `c` with placeholders for its earlier exchange and `user` last, after
/// `media`.
fn messages(c: &Conversation, user: &str, media: &[Media]) -> serde_json::Value {
    let mut m = Vec::new();
    if let Some(s) = c.system {
        m.push(json!({"role": "system", "content": s}));
    }
    if c.continues {
        m.push(json!({"role": "user", "content": mark(0)}));
        m.push(json!({"role": "assistant", "content": mark(1)}));
    }
    if media.is_empty() {
        m.push(json!({"role": "user", "content": user}));
    } else {
        let mut content: Vec<_> = media.iter().map(|m| m.item()).collect();
        content.push(json!({"type": "text", "text": user}));
        m.push(json!({"role": "user", "content": content}));
    }
    serde_json::Value::Array(m)
}

impl ChatTemplate {
    /// The text of a new user turn `user` in the conversation `c`.
    pub fn next_turn(&self, c: &Conversation, user: &str) -> Result<TurnText, TemplateError> {
        let shape = mark(if c.continues { 2 } else { 0 });
        let think = Some(c.thinking);
        let placeholders =
            self.render_after_bos(&messages(c, &shape, &[]), true, think, c.tools)?;
        let first = placeholders
            .find(&mark(0))
            .ok_or_else(|| self.fault("does not write the user's message"))?;
        let header = placeholders[..first].to_string();
        let real = self.render_after_bos(&messages(c, user, c.media), true, think, c.tools)?;
        let turn = if c.continues {
            let answer = mark(1);
            let end = real
                .rfind(&answer)
                .ok_or_else(|| self.fault("does not write the model's earlier answer"))?;
            &real[end + answer.len()..]
        } else {
            real.strip_prefix(&header)
                .ok_or_else(|| self.fault("changes its opening with the user's message"))?
        };
        if turn.contains('\u{E000}') {
            return Err(self.fault("repeats earlier messages after the last answer"));
        }
        // Where the user's words landed: the same render with a mark in their place (without
        // media, the placeholders' render is that one).
        let user_at = if c.media.is_empty() {
            written_at(&real, &placeholders, &shape)
        } else {
            let user_mark = mark(7);
            let shaped =
                self.render_after_bos(&messages(c, &user_mark, c.media), true, think, c.tools)?;
            written_at(&real, &shaped, &user_mark)
        };
        let user = shifted(user_at, real.len() - turn.len(), turn.len());
        let system = match c.system {
            Some(_) => {
                let system_mark = mark(8);
                let c8 = Conversation {
                    system: Some(&system_mark),
                    ..*c
                };
                let shaped =
                    self.render_after_bos(&messages(&c8, &shape, &[]), true, think, c.tools)?;
                let at = written_at(&placeholders, &shaped, &system_mark);
                Some(shifted(at, 0, header.len()))
            }
            None => None,
        };
        Ok(TurnText {
            header,
            turn: turn.to_string(),
            system,
            user,
        })
    }
}

/// The chat templates a model is rendered with: its own, if it ships one that compiles, and the
/// family's built-in layout, which stands in when it has none or it fails.
#[derive(Debug)]
pub struct ChatFormat {
    own: Option<Result<ChatTemplate, TemplateError>>,
    builtin: ChatTemplate,
    /// The checkpoint's template ran into a limit once, or was slow [`SLOW_STRIKES`] times: the
    /// built-in layout stands in from then.
    refused: std::sync::OnceLock<TemplateError>,
    /// Slow renders so far, and a note on the last one not yet taken.
    slow: std::sync::Mutex<(u32, Option<String>)>,
    /// What counts as slow ([`SLOW`]; tests count every render).
    slow_after: std::time::Duration,
}

/// A render slower than this is reported: a real template renders a turn in milliseconds.
pub const SLOW: std::time::Duration = std::time::Duration::from_secs(1);
/// Slow renders after which the checkpoint's template is no longer used.
pub const SLOW_STRIKES: u32 = 3;

/// The chat layouts built in, one per Gemma generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// Gemma 3: a system prompt folds into the first user turn.
    Gemma3,
    /// Gemma 4: system turns, thinking, `<|turn>` markers.
    Gemma4,
}

impl Builtin {
    fn source(self) -> TemplateSource {
        let (text, name) = match self {
            Builtin::Gemma4 => (
                include_str!("../../../../../assets/templates/gemma4.jinja"),
                "Gemma 4",
            ),
            Builtin::Gemma3 => (
                include_str!("../../../../../assets/templates/gemma3.jinja"),
                "Gemma 3",
            ),
        };
        TemplateSource {
            text: text.to_string(),
            origin: format!("built-in {name} layout"),
        }
    }
}

impl ChatFormat {
    /// The format for a checkpoint that ships `own` (or nothing) over the `builtin` layout of its
    /// generation, with BOS and EOS texts `bos` and `eos`.
    pub fn new(own: Option<&TemplateSource>, builtin: Builtin, bos: &str, eos: &str) -> Self {
        let builtin = builtin.source();
        let Ok(builtin) = ChatTemplate::new(&builtin, bos, eos).map(ChatTemplate::trusted) else {
            unreachable!("the built-in templates compile (tested)")
        };
        let own = own.map(|s| ChatTemplate::new(s, bos, eos));
        if let Some(Ok(t)) = &own {
            t.start_sandbox();
        }
        Self {
            own,
            builtin,
            refused: std::sync::OnceLock::new(),
            slow: std::sync::Mutex::default(),
            slow_after: SLOW,
        }
    }

    /// The checkpoint's own template: `None` when it ships none, an error when it does not
    /// compile.
    pub fn own(&self) -> Option<&Result<ChatTemplate, TemplateError>> {
        self.own.as_ref()
    }

    /// The family's built-in layout.
    pub fn builtin(&self) -> &ChatTemplate {
        &self.builtin
    }

    /// A new user turn, rendered with the checkpoint's template; when that fails, with the
    /// built-in layout, and the template's error comes back beside it. A template that ran into
    /// a limit is not run again.
    pub fn next_turn(
        &self,
        c: &Conversation,
        user: &str,
    ) -> Result<(TurnText, Option<TemplateError>), TemplateError> {
        let failed = match (&self.own, self.refused.get()) {
            (None, _) => None,
            (Some(_), Some(e)) => Some(e.clone()),
            (Some(Ok(t)), None) => match self.timed(t, || t.next_turn(c, user)) {
                Ok(turn) => return Ok((turn, None)),
                // Stopped by the user: the turn ends here, no layout stands in.
                Err(e) if t.interrupted() => return Err(e),
                Err(e) => {
                    if e.limit {
                        let _ = self.refused.set(e.clone());
                    }
                    Some(e)
                }
            },
            (Some(Err(e)), None) => Some(e.clone()),
        };
        Ok((self.builtin.next_turn(c, user)?, failed))
    }

    /// `render` with `t`, timed: a slow one is noted ([`Self::take_slow`]), and the
    /// [`SLOW_STRIKES`]th refuses the template from then on.
    fn timed<T>(&self, t: &ChatTemplate, render: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = render();
        let took = started.elapsed();
        if took >= self.slow_after {
            let mut slow = self.slow.lock().unwrap_or_else(|p| p.into_inner());
            slow.0 += 1;
            let secs = took.as_secs_f64();
            slow.1 = Some(if slow.0 >= SLOW_STRIKES {
                let _ = self.refused.set(t.fault(&format!(
                    "was slow {SLOW_STRIKES} times (the last render took {secs:.1} s; a turn \
                     takes milliseconds), and is no longer used"
                )));
                format!(
                    "the chat template ({}) took {secs:.1} s, its {SLOW_STRIKES}th slow render: \
                     the built-in layout stands in from the next turn",
                    t.origin()
                )
            } else {
                format!(
                    "the chat template ({}) took {secs:.1} s to render this turn (slow {} of \
                     {SLOW_STRIKES} times before the built-in layout stands in)",
                    t.origin(),
                    slow.0
                )
            });
        }
        out
    }

    /// What stops a render of the checkpoint's template from now on (see
    /// [`ChatTemplate::set_interrupt`]).
    pub fn set_interrupt(&self, interrupt: Option<super::sandbox::Interrupt>) {
        if let Some(Ok(t)) = &self.own {
            t.set_interrupt(interrupt);
        }
    }

    /// The note on a slow render since the last call, if there was one.
    pub fn take_slow(&self) -> Option<String> {
        self.slow.lock().unwrap_or_else(|p| p.into_inner()).1.take()
    }
}

#[cfg(test)]
#[path = "turns_tests.rs"]
mod tests;
