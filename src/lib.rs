//! gemma-chat: a terminal chat application that runs Gemma 4 (and Gemma 3) models in-process on
//! burn.
//!
//! Module map, by role:
//! - Inference core: [`model`] (config, decoder, KV cache; weights only, no conversation state),
//!   [`loader`] (safetensors and GGUF: named tensors in their stored GGML type, used in place
//!   from the mapped file), [`tokenizer`] (text ↔ ids).
//! - Running it: [`engine`] (warm per-tab sessions, the engine thread and its protocol),
//!   [`generate`] (loading, and the headless prefill + decode loop), [`sampling`] (greedy and
//!   seeded sampling on the host), [`backend`] (device selection), [`demo`] (the demo model).
//! - The product: [`app`] (the UI's state and its `update`, which sees only
//!   [`engine::protocol`]), [`ui`] (rendering, a pure function of the app), [`tui`] (terminal
//!   set-up, the event loop, restore on every exit), [`config`] (the TOML configuration).
//! - Errors: [`error`].
//!
//! | I want to… | Go to |
//! |---|---|
//! | fix a numerical bug in a layer | `model/*.rs` (burn's graph: GPUs, the reference), and `model/fused/` (the CPU's fused host step) |
//! | support a new checkpoint naming or format | `loader/*.rs` |
//! | add a GGML type, or speed up its products | `loader/quant.rs` (layout) → `model/qmatmul/` (row kernels per SIMD level, `gemm.rs` for prefill, `team.rs` threads) |
//! | change how a config.json is read | `model/config.rs` |
//! | change temperature, top-p or other sampling | `sampling.rs` |
//! | fix history reuse, rewinds or memory across tabs | `engine/session.rs`, `model/kv_cache/` |
//! | fix streaming, stop or tab scheduling | `engine/worker.rs`, `engine/turn.rs` |
//! | change a key or add an action | `config/default.toml` → `app/action.rs` → `app/mod.rs` |
//! | change how a message looks | `app/markdown.rs`, `ui/transcript.rs`, `ui/theme.rs` |

pub mod app;
pub mod backend;
pub mod config;
pub mod demo;
pub mod engine;
pub mod error;
pub mod generate;
pub mod loader;
pub mod model;
pub mod sampling;
pub mod tokenizer;
pub mod tui;
pub mod ui;

pub use error::{Error, Result};
