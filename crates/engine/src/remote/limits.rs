//! Every bound the remote engine puts on what a server sends, in one place: a hostile or broken
//! server meets these (answers, event lines, calls, ids, counts), and each file that enforces one
//! names it from here.

/// Most bytes of one event line (or one event's data).
pub const MAX_LINE: usize = 4 << 20;

/// Most calls one answer may make (more is a hostile server: the answer is cut off there).
pub const MAX_CALLS: usize = 32;

/// Most bytes of one call's arguments (more: the call fails, with an error the model reads).
pub const MAX_ARGUMENTS: usize = 64 << 10;

/// Most bytes of a call's id, and of its name, kept.
pub const MAX_ID: usize = 128;

/// Most bytes of a JSON answer (`/v1/models`, `/props`, `/slots`, `/tokenize`, …).
pub const MAX_BODY: usize = 8 << 20;

/// Most bytes of an error's body read for its message (the rest is not read).
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// Most models named in a message.
pub const MAX_NAMED: usize = 20;

/// Most llama-server slots believed (`/props` `total_slots`).
pub const MAX_SLOTS: u64 = 256;

/// Most tokens of context believed (`n_ctx`, `max_model_len`).
pub const MAX_CONTEXT: u64 = 1 << 24;

/// Most tokens a count may say (more is not a count of this world).
pub const MAX_COUNT: u64 = 1 << 32;
