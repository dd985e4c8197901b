//! The front end of gemma-chat: the TOML configuration and key bindings ([`config`]), the UI's
//! state and its `update` ([`app`], chats stored in [`chats`]), rendering as a pure function
//! of that state ([`ui`]) and the terminal with its event loop ([`tui`]). It talks to an engine
//! only through `gemma_protocol` — the compiler keeps it so: this crate does not depend on the
//! engine or the model.
//!
//! | I want to… | Go to |
//! |---|---|
//! | change a key or add an action | `config/default.toml` (the repository's) → `config/action.rs` → `app/keys.rs` |
//! | change a setting's range or default | `config/sampling.rs` (sampling), `config/mod.rs` (the file's structure) |
//! | change how a message looks | `ui/transcript.rs`, `ui/markdown.rs`, `ui/theme.rs` |
//! | change tool calls: approval, lines under answers, `/tools` | `app/approval.rs`, `app/tools.rs`, `app/tool_cmds.rs`, `ui/approval.rs`, `ui/tool_lines.rs` |
//! | change how attached text files are read or sent | `attach/` (`compose` makes a turn's text), `app/attachments.rs` (`/attach`, chips) |
//! | change push-to-talk | `mic.rs` (the device, feature `mic`), `app/record.rs` (the key, the chip) |
//! | change how chats are saved, exported or imported | `chats/` (the files), `app/persist.rs` and `app/chat_tree.rs` (tabs into them and back) |

pub mod app;
pub mod attach;
pub mod chats;
pub mod config;
pub mod error;
pub mod mic;
pub mod tui;
pub mod ui;

pub use error::{Error, Result};
