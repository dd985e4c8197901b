//! The checkpoint's own chat template (`chat_template.jinja`, or `chat_template` in
//! `tokenizer_config.json`), rendered with minijinja. Only the new user turn is rendered: the
//! history stays in token space, so a warm session tokenizes nothing twice.

use std::path::Path;

use minijinja::{Environment, Error as JinjaError, ErrorKind, context};

use crate::error::{Error, Result};
use crate::tokenizer::TurnText;

/// A loaded chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
}

impl ChatTemplate {
    /// The template of the model directory `dir`, if it ships one.
    pub fn from_dir(dir: &Path, bos: &str) -> Result<Option<Self>> {
        let file = dir.join("chat_template.jinja");
        let source = if file.exists() {
            std::fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?
        } else {
            let config = dir.join("tokenizer_config.json");
            let Ok(text) = std::fs::read_to_string(&config) else {
                return Ok(None);
            };
            let json: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| Error::Tokenizer(format!("{}: {e}", config.display())))?;
            match json.get("chat_template").and_then(|t| t.as_str()) {
                Some(t) => t.to_string(),
                None => return Ok(None),
            }
        };
        Self::new(source, bos).map(Some)
    }

    /// Compiles a template; `bos` is the BOS token's text, which the template may emit and which
    /// the engine adds as an id instead.
    pub fn new(source: String, bos: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source)
            .map_err(|e| Error::Tokenizer(format!("the chat template does not compile: {e}")))?;
        Ok(Self {
            env,
            bos: bos.to_string(),
        })
    }

    /// One user turn and the opening of the model's turn, without the leading BOS.
    pub fn user_turn(&self, text: &str, thinking: bool) -> Result<String> {
        let tpl = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let out = tpl
            .render(context! {
                messages => vec![context! { role => "user", content => text }],
                add_generation_prompt => true,
                enable_thinking => thinking,
                bos_token => self.bos.as_str(),
            })
            .map_err(|e| Error::Tokenizer(format!("the chat template failed: {e}")))?;
        Ok(out
            .strip_prefix(self.bos.as_str())
            .map(str::to_string)
            .unwrap_or(out))
    }

    /// A user turn split into the conversation header and the turn: the header is what the
    /// thinking-on render puts before the user turn that the thinking-off render starts with.
    pub fn turn_text(&self, text: &str, thinking: bool) -> Result<TurnText> {
        let off = self.user_turn(text, false)?;
        if !thinking {
            return Ok(TurnText {
                header: String::new(),
                turn: off,
            });
        }
        let on = self.user_turn(text, true)?;
        let opening = off.find(text.trim()).map_or("", |at| &off[..at]);
        Ok(match on.find(opening).filter(|_| !opening.is_empty()) {
            Some(at) => TurnText {
                header: on[..at].to_string(),
                turn: on[at..].to_string(),
            },
            None => TurnText {
                header: String::new(),
                turn: on,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Family;
    use crate::tokenizer::user_turn;

    #[test]
    fn gemma3_template_renders_the_built_in_layout() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/templates/gemma3.jinja"
        );
        let source = std::fs::read_to_string(path).expect("fixture");
        let t = ChatTemplate::new(source, "<bos>").expect("compiles");
        let got = t.user_turn("  Hello there \n", false).expect("renders");
        assert_eq!(got, user_turn(Family::Gemma3, "Hello there"));
    }

    #[test]
    fn gemma4_template_splits_the_thinking_header_from_the_turn() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/templates/gemma4.jinja"
        );
        let source = std::fs::read_to_string(path).expect("fixture");
        let t = ChatTemplate::new(source, "<bos>").expect("compiles");
        for thinking in [false, true] {
            let got = t
                .turn_text(" Why is the sky blue? ", thinking)
                .expect("renders");
            let want =
                crate::tokenizer::thinking_turn(Family::Gemma4, "Why is the sky blue?", thinking);
            assert_eq!(got, want, "thinking {thinking}");
        }
    }

    #[test]
    fn template_errors_are_reported() {
        assert!(ChatTemplate::new("{% if %}".into(), "<bos>").is_err());
        let t = ChatTemplate::new("{{ raise_exception('no') }}".into(), "<bos>").expect("ok");
        assert!(t.user_turn("x", false).is_err());
    }
}
