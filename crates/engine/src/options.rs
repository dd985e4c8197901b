//! What the engine is started with: its memory limits for the sessions' KV state, where warm
//! state is kept across runs, the context limit and what becomes of thoughts.

use super::protocol::TabId;
use super::thinking::ThinkingPolicy;

/// Memory limits for the sessions' KV state, and what becomes of thoughts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Bytes of KV state allowed on the compute device (`None`: no limit). Past it, the least
    /// recently used idle tab moves to host memory.
    pub memory_budget: Option<usize>,
    /// Bytes of KV state allowed in host memory (`None`: no limit). Past it, a tab drops to text.
    pub host_budget: Option<usize>,
    /// Context limit per tab in tokens (`None`: the model's maximum; never more than it).
    pub context_length: Option<usize>,
    /// Whether the user asked for `context_length` explicitly: then a value over the model's
    /// maximum is refused (at load) instead of capped.
    pub context_strict: bool,
    /// Where warm tabs' KV state is saved on shutdown and found again on restore (`None`: no
    /// warm restart).
    pub kv_dir: Option<std::path::PathBuf>,
    /// Where the conversations of attached chats are saved, in ids (`None`: not saved; an
    /// attached chat is rebuilt from its transcript).
    pub convo_dir: Option<std::path::PathBuf>,
    /// The vision tower of a GGUF model (llama.cpp's mmproj); `None`: one beside the model, or
    /// the checkpoint's own.
    pub mmproj: Option<std::path::PathBuf>,
    /// Most bytes of disk for those snapshots.
    pub kv_disk_bytes: u64,
    /// What a finished turn keeps of its thought (Gemma 4 thinking).
    pub thinking_policy: ThinkingPolicy,
    /// Written (as plain text) before the close a thought budget forces (`None`: nothing).
    pub thinking_message: Option<String>,
    /// The tools the model may call (MCP servers and built-ins), started by the front end.
    pub tools: Option<crate::tools::SharedTools>,
    /// Bounds on calls of a front end's own tools when no host is started (`[tools]`'s
    /// `max_calls` and `max_call_tokens`; a host's tools keep the host's bounds).
    pub call_limits: gemma_tools::config::Limits,
    /// Tests only: the tab's next turn fails after this many forward steps.
    #[doc(hidden)]
    pub inject_failure: Option<(TabId, usize)>,
    /// Tests only: ids forced at these answer positions of every turn (see
    /// [`crate::turn::TurnOptions::forced`]).
    #[doc(hidden)]
    pub forced: Vec<(usize, u32)>,
}
