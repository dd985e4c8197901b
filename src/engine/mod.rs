//! The engine side of gemma-chat: one engine thread ([`worker`]) owns the weights and a warm
//! [`session`] per tab; the UI talks to it only through [`protocol`].

pub mod kv_store;
pub mod protocol;
pub mod session;
pub mod stop;
pub mod thinking;
mod turn;
pub mod worker;
