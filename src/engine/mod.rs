//! The engine side of gemma-chat: warm per-conversation sessions over one shared model. The
//! engine thread and its protocol build on [`session`].

pub mod session;
