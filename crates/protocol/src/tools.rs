//! Tools as the front ends and the engines speak of them: what a tab may call
//! ([`ToolChoice`], [`ToolSelection`]), the catalogue the engine offers ([`ToolInfo`]), a call the
//! model made ([`ToolCall`]), the user's answer to it ([`ToolDecision`]) and what came back
//! ([`ToolOutcome`]). Plain data; the engine runs the tools, the front end only asks the user.

/// Whether the model may, must or must not call a tool (OpenAI's `tool_choice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The answer starts with a call (one at least; after its result the model decides).
    Required,
    /// No call: the tools stay declared, the call token is never sampled.
    None,
}

impl ToolChoice {
    /// Every choice, for reading names back.
    pub const ALL: [ToolChoice; 3] = [ToolChoice::Auto, ToolChoice::Required, ToolChoice::None];

    /// The choice named `name` (see [`ToolChoice::as_str`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// `auto`, `required` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

/// Which of the engine's tools a tab declares to the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolSelection {
    /// Every tool of every enabled server and every enabled built-in.
    #[default]
    All,
    /// None: the model sees no declarations.
    Off,
    /// These, by qualified name (`server.tool`; built-ins as `builtin.fetch_url`) or by server
    /// (`server`, all its tools).
    Only(Vec<String>),
}

impl ToolSelection {
    /// Whether `tool` of `server` is selected.
    pub fn includes(&self, server: &str, tool: &str) -> bool {
        match self {
            ToolSelection::All => true,
            ToolSelection::Off => false,
            ToolSelection::Only(names) => names
                .iter()
                .any(|n| n == server || *n == format!("{server}.{tool}")),
        }
    }
}

/// One tool the engine can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The name the model calls it by (unique across servers).
    pub name: String,
    /// The MCP server it comes from, or `builtin`.
    pub server: String,
    /// What it does, as the server describes it (cleaned for the terminal and the prompt).
    pub description: String,
    /// Its arguments' JSON schema, as JSON text.
    pub parameters: String,
    /// Calls run without asking (the server's `auto_approve`, or "always" chosen before).
    pub auto_approve: bool,
}

/// A tool the front end declares and answers itself (an API client's `tools`): the engine
/// declares it to the model and constrains calls to its schema, but never runs it: a call ends
/// the turn ([`crate::TurnEnd::ToolCalls`]) and the front end sends the response with the
/// conversation's path before [`crate::Command::Continue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTool {
    /// The name the model calls it by (`[A-Za-z0-9_-]`, unique among the tab's).
    pub name: String,
    /// What it does (cleaned for the prompt by the engine).
    pub description: String,
    /// Its arguments' JSON schema, as JSON text (an object).
    pub parameters: String,
}

/// A server's state in the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Its name in the config (`builtin` for the built-in tools).
    pub name: String,
    /// `stdio`, `http` or `builtin`.
    pub transport: String,
    /// `disabled`, `starting`, `ready` or `failed`.
    pub state: String,
    /// The tools it offers, by the server's names.
    pub tools: Vec<String>,
    /// Why it offers none or only some (it did not start, crashed, or lied about its tools).
    pub error: Option<String>,
}

/// A call the model made, with its arguments parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    /// Numbers the tab's calls, from 1, across its turns.
    pub id: u64,
    /// The tool.
    pub name: String,
    /// Its server (`builtin` for a built-in).
    pub server: String,
    /// The arguments, as compact JSON text (an object).
    pub arguments: String,
    /// The call as the model wrote it, in its own syntax (Gemma 4's `call:NAME{…}`, string
    /// delimiters as `<|"|>`); empty where calls arrive as JSON (a server's).
    pub written: String,
    /// Bytes of the answer's text before the hand-over the call belongs to.
    pub at: usize,
    /// The hand-over's number in its turn, from 0 (the calls of one hand-over share it).
    pub handover: usize,
}

/// A call an answer made, as a conversation rebuilt from its transcript writes it again: the
/// call as the model wrote it, where, and the response the model read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallMade {
    /// The tool.
    pub name: String,
    /// The arguments, as compact JSON text (what a server's chat API is sent).
    pub arguments: String,
    /// See [`ToolCall::written`].
    pub written: String,
    /// See [`ToolCall::at`].
    pub at: usize,
    /// See [`ToolCall::handover`].
    pub handover: usize,
    /// The tool's response as the model read it (`None`: the turn ended before it came).
    pub response: Option<CallResponse>,
}

impl CallMade {
    /// `call` as a transcript keeps it, with its outcome when it has one.
    pub fn new(call: &ToolCall, outcome: Option<&ToolOutcome>) -> Self {
        Self {
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            written: call.written.clone(),
            at: call.at,
            handover: call.handover,
            response: outcome.map(|o| CallResponse {
                text: o.text.clone(),
                structured: o.structured.clone(),
            }),
        }
    }
}

/// `answer` cut at its hand-overs to the tools: for each hand-over of `calls` (consecutive calls
/// sharing [`CallMade::handover`]), the answer's text since the one before and its calls; then
/// the text after the last. A place past the text, or before the previous one, is taken as the
/// nearest that is not (a hand-edited chat file cannot split a character or go back).
pub fn hand_overs<'a, C: std::borrow::Borrow<CallMade>>(
    answer: &'a str,
    calls: &'a [C],
) -> (Vec<(&'a str, &'a [C])>, &'a str) {
    let (mut out, mut from, mut rest) = (Vec::new(), 0, calls);
    while let Some(first) = rest.first().map(|c| c.borrow()) {
        let n = rest
            .iter()
            .take_while(|c| c.borrow().handover == first.handover)
            .count();
        let (batch, later) = rest.split_at(n);
        let mut at = first.at.clamp(from, answer.len());
        while !answer.is_char_boundary(at) {
            at -= 1;
        }
        out.push((&answer[from..at], batch));
        (from, rest) = (at, later);
    }
    (out, &answer[from..])
}

/// A tool's response as the model read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallResponse {
    /// Its text (see [`ToolOutcome::text`]).
    pub text: String,
    /// See [`ToolOutcome::structured`].
    pub structured: Option<String>,
}

/// The user's answer to a call that needs approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDecision {
    /// Run it, this once.
    Once,
    /// Run it, and every later call of this tool in this tab.
    Tab,
    /// Run it, and every later call of this tool anywhere (the front end saves it to the
    /// config).
    Always,
    /// Do not run it; the model gets the note (or a plain refusal) as the tool's response.
    Deny {
        /// What to tell the model.
        note: Option<String>,
    },
}

/// What became of a call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutcome {
    /// The call's [`ToolCall::id`].
    pub id: u64,
    /// The tool.
    pub name: String,
    /// Whether the tool answered (false: denied, failed, timed out, stopped).
    pub ok: bool,
    /// What the model was given as the tool's response (cut to the configured size, with a
    /// note where it was cut).
    pub text: String,
    /// The response as the model read it when it was an object (a structured result, or an
    /// error as `{"error": …}`), compact JSON text; `None`: the model read `text` as it is.
    pub structured: Option<String>,
    /// Bytes the tool returned, before any cut.
    pub bytes: usize,
    /// Seconds it ran.
    pub seconds: f64,
}
