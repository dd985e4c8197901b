//! Tools in the local engine: the [`ToolHost`] the front end started (MCP servers, built-ins),
//! the model's vocabulary as the call grammar reads it, and per tab what it declares, what it
//! may call and what the user approved. A turn's calls are steered by [`guide::CallGuide`] and
//! run by [`run::ToolRun`]; their responses are written as the chat template writes them and fed
//! inside the same model turn.

pub mod guide;
pub mod run;
pub mod text;

use std::collections::BTreeSet;
use std::sync::Arc;

use gemma_model::tokenizer::Tokenizer;
use gemma_tools::host::{ToolHost, ToolSpec};
use gemma_tools::syntax::{CallGrammar, Vocab};

use super::protocol::{ClientTool, ToolSelection};
use gemma_tools::config::Limits;
use gemma_tools::host::clean;
pub use text::ToolText;

/// How often an engine whose turns wait only for their tools looks for the results (both
/// engines: the local one and the remote one).
pub(crate) const TOOL_POLL: std::time::Duration = std::time::Duration::from_millis(15);

/// The tool host an engine runs calls on, shared with whoever started it (compared by identity,
/// so that options holding it stay comparable).
#[derive(Clone)]
pub struct SharedTools(pub Arc<ToolHost>);

impl std::fmt::Debug for SharedTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTools")
    }
}

impl PartialEq for SharedTools {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedTools {}

/// The ids of Gemma 4's tool markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolIds {
    /// `<|tool_call>`.
    pub call: u32,
    /// `<tool_call|>`.
    pub call_end: u32,
    /// `<|tool_response>`: the model hands over to its tools.
    pub response: u32,
    /// `<tool_response|>`.
    pub response_end: u32,
    /// `<|"|>`, the string delimiter.
    pub quote: u32,
}

impl ToolIds {
    /// The markers of `tok`'s vocabulary, when it has them all (Gemma 4 does).
    pub fn of(tok: &Tokenizer) -> Option<Self> {
        Some(Self {
            call: tok.token_id("<|tool_call>")?,
            call_end: tok.token_id("<tool_call|>")?,
            response: tok.token_id("<|tool_response>")?,
            response_end: tok.token_id("<tool_response|>")?,
            quote: tok.token_id("<|\"|>")?,
        })
    }
}

/// A tab's tool approvals (what it declares and may call are its `TabSettings`).
#[derive(Debug, Clone, Default)]
pub struct TabTools {
    /// Tools the user approved for the tab ("t").
    pub approved: BTreeSet<String>,
    /// The last call's id.
    pub last_call: u64,
}

/// The engine's tools: the host (when the front end started one) and the model's vocabulary for
/// the grammar, which a front end's own tools ([`ClientTool`]) need too.
pub struct EngineTools {
    /// Runs the calls (`None`: only a front end's own tools can be declared).
    pub host: Option<Arc<ToolHost>>,
    /// The vocabulary as bytes, for the call grammar.
    pub vocab: Arc<Vocab>,
    /// The markers, and calls and responses in ids (shared with the renders of rebuilt
    /// conversations, so that the vocabulary is read once).
    pub text: Arc<ToolText>,
    /// Tools approved everywhere this run ("a").
    pub always: BTreeSet<String>,
    /// Bounds on calls: the host's, or the engine's own for a front end's tools.
    limits: Limits,
}

impl EngineTools {
    /// Tools for a model read by `tok`, or why it cannot call any.
    pub fn new(host: Option<Arc<ToolHost>>, tok: &Tokenizer) -> Result<Self, String> {
        let bytes = tok.vocab_bytes();
        let text = ToolText::with_bytes(tok, &bytes).ok_or_else(|| {
            "this model's vocabulary has no tool-call markers (<|tool_call>…): only Gemma 4 calls \
             tools"
                .to_string()
        })?;
        let vocab = Vocab::new(bytes, text.ids.quote, text.ids.call_end);
        let limits = host
            .as_ref()
            .map_or_else(Limits::default, |h| h.limits().clone());
        Ok(Self {
            host,
            vocab: Arc::new(vocab),
            text: Arc::new(text),
            always: BTreeSet::new(),
            limits,
        })
    }

    /// With `limits` on calls (for a front end's own tools, without a host).
    pub fn with_limits(self, limits: Limits) -> Self {
        Self { limits, ..self }
    }

    /// The tools a tab with `selection` declares, by name.
    pub fn declared(&self, selection: &ToolSelection) -> Vec<ToolSpec> {
        let Some(host) = &self.host else {
            return Vec::new();
        };
        let mut tools: Vec<ToolSpec> = host
            .tools()
            .into_iter()
            .filter(|t| selection.includes(&t.server, &t.name))
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The bounds on calls.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether a call of `tool` runs without asking.
    pub fn approved(&self, tab: &TabTools, tool: &ToolSpec) -> bool {
        tool.auto_approve || self.always.contains(&tool.name) || tab.approved.contains(&tool.name)
    }

    /// The grammar of calls to `tools`.
    pub fn grammar(tools: &[ToolSpec]) -> Result<CallGrammar, String> {
        let decl: Vec<(String, serde_json::Value)> = tools
            .iter()
            .map(|t| (t.name.clone(), t.parameters.clone()))
            .collect();
        CallGrammar::new(&decl).map_err(|e| e.to_string())
    }
}

/// The server name a front end's own tools go by in calls and specs.
pub const CLIENT: &str = "client";

/// A front end's tools as specs, cleaned as a server's are; a tool whose name is not
/// `[A-Za-z0-9_-]` (the name the front end expects back) or whose schema cannot be read is left
/// out, with why.
pub fn client_specs(tools: &[ClientTool]) -> (Vec<ToolSpec>, Vec<String>) {
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    for t in tools {
        if clean::tool_name(&t.name) != t.name {
            refused.push(format!("{} (a name is 1 to 64 of A-Z a-z 0-9 _ -)", t.name));
            continue;
        }
        let schema = match serde_json::from_str::<serde_json::Value>(&t.parameters) {
            Ok(serde_json::Value::Object(m)) => clean::schema(&m),
            _ => Err("its parameters are not a JSON object".to_string()),
        };
        match schema {
            Ok(m) => ok.push(ToolSpec {
                name: t.name.clone(),
                server: CLIENT.into(),
                description: clean::prompt_text(&t.description, clean::MAX_DESCRIPTION),
                parameters: serde_json::Value::Object(m),
                auto_approve: false,
            }),
            Err(e) => refused.push(format!("{} ({e})", t.name)),
        }
    }
    (ok, refused)
}

/// `tools` as the chat template takes them (`apply_chat_template(tools=…)`): OpenAI's function
/// declarations.
pub fn declarations(tools: &[ToolSpec]) -> serde_json::Value {
    serde_json::Value::Array(
        tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect(),
    )
}
