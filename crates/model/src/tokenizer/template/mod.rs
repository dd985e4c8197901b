//! Chat templates: the checkpoint's own (`chat_template.jinja`, `chat_template` in
//! `tokenizer_config.json`, or a GGUF's `tokenizer.chat_template`) compiled and rendered as
//! transformers renders it ([`python`] has the environment), and what a new turn adds to a
//! conversation ([`turns`]), with the family's built-in layout standing in when a template is
//! missing or fails.

pub mod python;
pub mod sandbox;
pub mod turns;

use std::path::Path;

use minijinja::{Environment, ErrorKind, Value, context};

pub use turns::{Builtin, ChatFormat, Conversation, Media, TurnText};

/// A template that does not compile or fails to render: what went wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the chat template ({origin}) {what}{}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
pub struct TemplateError {
    /// Where the template came from, e.g. `chat_template.jinja`.
    pub origin: String,
    /// What happened.
    pub what: String,
    /// The template's line, when known.
    pub line: Option<usize>,
    /// It ran into a limit (work, output, memory or time): the template is refused, not retried.
    pub limit: bool,
}

impl From<TemplateError> for crate::error::Error {
    fn from(e: TemplateError) -> Self {
        crate::error::Error::Template(e.to_string())
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    origin: String,
    /// Rendered in [`sandbox`] (the checkpoint's own templates), or here (the built-in layouts).
    isolated: bool,
    sandbox: sandbox::Sandbox,
}

/// A template's source text and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSource {
    /// The Jinja source.
    pub text: String,
    /// Where it came from, for messages.
    pub origin: String,
}

impl TemplateSource {
    /// The template a model directory ships: `chat_template.jinja`, else `chat_template` in
    /// `tokenizer_config.json` (a string, or a list of named templates of which `default` is
    /// taken). `None` when it ships none.
    pub fn from_dir(dir: &Path) -> crate::error::Result<Option<Self>> {
        let file = dir.join("chat_template.jinja");
        if file.exists() {
            let text =
                std::fs::read_to_string(&file).map_err(|e| crate::error::Error::io(&file, e))?;
            return Ok(Some(Self {
                text,
                origin: "chat_template.jinja".into(),
            }));
        }
        let config = dir.join("tokenizer_config.json");
        let Ok(text) = std::fs::read_to_string(&config) else {
            return Ok(None);
        };
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| crate::error::Error::Tokenizer(format!("{}: {e}", config.display())))?;
        let text = match json.get("chat_template") {
            Some(serde_json::Value::String(t)) => Some(t.clone()),
            Some(serde_json::Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            _ => None,
        };
        Ok(text.map(|text| Self {
            text,
            origin: "tokenizer_config.json".into(),
        }))
    }
}

/// Most bytes of a chat template's source (Gemma 4's is about 16 KiB).
pub const MAX_SOURCE: usize = 1 << 20;

impl ChatTemplate {
    /// Compiles `source`, an untrusted template (each render runs in the [`sandbox`]); `bos` and
    /// `eos` are the token texts the template may emit (the engine adds BOS as an id instead).
    pub fn new(source: &TemplateSource, bos: &str, eos: &str) -> Result<Self, TemplateError> {
        // Compiled here, bounded by size: real chat templates are a few KiB to a few tens.
        if source.text.len() > MAX_SOURCE {
            return Err(TemplateError {
                origin: source.origin.clone(),
                what: format!(
                    "is {} KiB, over the {} KiB a chat template may be, and was not compiled",
                    source.text.len() >> 10,
                    MAX_SOURCE >> 10
                ),
                line: None,
                limit: true,
            });
        }
        let mut env = python::environment();
        env.add_template_owned("chat", python::without_generation_tags(&source.text))
            .map_err(|e| error(&source.origin, "does not compile", &e))?;
        Ok(Self {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            origin: source.origin.clone(),
            isolated: true,
            sandbox: sandbox::Sandbox::default(),
        })
    }

    /// What stops this template's renders from now on: asked every 50 ms while one runs (the
    /// built-in layouts render in-process, in microseconds, and are not stopped).
    pub fn set_interrupt(&self, interrupt: Option<sandbox::Interrupt>) {
        self.sandbox.set_interrupt(interrupt);
    }

    /// Whether a render of this template should stop now.
    pub fn interrupted(&self) -> bool {
        self.sandbox.interrupted()
    }

    /// Makes the sandbox's helper process now, while the process is small; the first render
    /// makes it otherwise.
    pub fn start_sandbox(&self) {
        if self.isolated {
            self.sandbox.start(&|request| self.render_request(request));
        }
    }

    /// A render request as it crosses to the sandbox.
    fn request(
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        thinking: Option<bool>,
        tools: Option<&serde_json::Value>,
    ) -> Vec<u8> {
        serde_json::to_vec(&(messages, add_generation_prompt, thinking, tools)).unwrap_or_default()
    }

    /// A request rendered (in the sandbox).
    fn render_request(&self, request: &[u8]) -> Result<String, TemplateError> {
        type Request = (
            serde_json::Value,
            bool,
            Option<bool>,
            Option<serde_json::Value>,
        );
        let (messages, add_generation_prompt, thinking, tools): Request =
            serde_json::from_slice(request).map_err(|e| self.fault(&format!("request: {e}")))?;
        self.render_here(&messages, add_generation_prompt, thinking, tools.as_ref())
    }

    /// This template rendered in-process: for the built-in layouts, which are known to be small.
    pub(crate) fn trusted(self) -> Self {
        Self {
            isolated: false,
            ..self
        }
    }

    /// Where the template came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// What the template renders for `messages` (a list of `{"role", "content", …}` objects;
    /// assistant messages may hold `tool_calls` and `reasoning_content`, and `role: "tool"`
    /// messages the calls' results), as transformers' `apply_chat_template(messages,
    /// tools=…)` renders it: `thinking` is passed as `enable_thinking` when given, `tools` (a
    /// list of `{"type": "function", "function": {"name", "description", "parameters"}}`
    /// declarations) as `tools`, none when there are none, and `documents` is none.
    pub fn render(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        thinking: Option<bool>,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, TemplateError> {
        // As transformers, which takes each tool as a dict (or a function it turns into one).
        let schemas = |t: &serde_json::Value| {
            t.as_array()
                .is_some_and(|l| l.iter().all(|x| x.is_object()))
        };
        if tools.is_some_and(|t| !schemas(t)) {
            return Err(self.fault("was given tools that are not a list of JSON schemas"));
        }
        if self.isolated {
            let request = Self::request(messages, add_generation_prompt, thinking, tools);
            self.sandbox
                .run(&self.origin, &request, &|r| self.render_request(r))
        } else {
            self.render_here(messages, add_generation_prompt, thinking, tools)
        }
    }

    /// [`Self::render`] in this process.
    fn render_here(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        thinking: Option<bool>,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, TemplateError> {
        let tpl = self
            .env
            .get_template("chat")
            .map_err(|e| error(&self.origin, "failed", &e))?;
        let messages = Value::from_serialize(messages);
        // transformers passes `tools=None` when it is given none.
        let tools = tools.map_or(Value::from(()), Value::from_serialize);
        let base = context! {
            messages,
            add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
            tools,
            documents => (),
        };
        let ctx = match thinking {
            Some(on) => context! { enable_thinking => on, ..base },
            None => base,
        };
        let mut out = Limited::default();
        match tpl.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.bytes).map_err(|_| self.fault("wrote invalid UTF-8")),
            Err(_) if out.over => Err(TemplateError {
                origin: self.origin.clone(),
                what: format!(
                    "wrote more than {} MiB and was stopped",
                    python::MAX_OUTPUT >> 20
                ),
                line: None,
                limit: true,
            }),
            Err(e) => Err(error(&self.origin, "failed", &e)),
        }
    }

    /// [`Self::render`] without the leading BOS text, which the engine adds as an id.
    pub fn render_after_bos(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        thinking: Option<bool>,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, TemplateError> {
        let out = self.render(messages, add_generation_prompt, thinking, tools)?;
        Ok(match out.strip_prefix(self.bos.as_str()) {
            Some(rest) if !self.bos.is_empty() => rest.to_string(),
            _ => out,
        })
    }

    /// An error about this template that is not minijinja's.
    fn fault(&self, what: &str) -> TemplateError {
        TemplateError {
            origin: self.origin.clone(),
            what: what.to_string(),
            line: None,
            limit: false,
        }
    }
}

/// A minijinja error as a [`TemplateError`]: its kind, its detail and its line.
fn error(origin: &str, doing: &str, e: &minijinja::Error) -> TemplateError {
    let what = match (e.kind(), e.detail()) {
        (ErrorKind::OutOfFuel, _) => format!(
            "{doing}: it ran more than {} million steps and was stopped",
            python::FUEL / 1_000_000
        ),
        (kind, Some(detail)) => format!("{doing}: {kind}: {detail}"),
        (kind, None) => format!("{doing}: {kind}"),
    };
    TemplateError {
        origin: origin.to_string(),
        what,
        line: e.line(),
        limit: e.kind() == ErrorKind::OutOfFuel,
    }
}

/// A byte sink that refuses to grow past [`python::MAX_OUTPUT`].
#[derive(Default)]
struct Limited {
    bytes: Vec<u8>,
    over: bool,
}

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > python::MAX_OUTPUT {
            self.over = true;
            return Err(std::io::Error::other("template output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
