//! The model side of gemma-chat, with no conversation state: checkpoints read from their files
//! ([`weights`]: safetensors and GGUF, tensors in their stored GGML type, used in place),
//! the decoder on burn ([`model`]: config, layers, KV cache, the CPU's fused step over
//! `gemma_kernels`), text and ids ([`tokenizer`], chat templates included), the next token
//! ([`sampling`]), the image and audio towers ([`vision`], [`audio`]), a checkpoint with its
//! tokenizer, templates and generation defaults
//! ([`checkpoint`]), the demo model ([`demo`]), the device ([`backend`]) and the typed errors
//! ([`error`]).
//!
//! | I want to… | Go to |
//! |---|---|
//! | fix a numerical bug in a layer | `model/*.rs` (burn's graph: GPUs, the reference), and `model/fused/` (the CPU's fused host step) |
//! | support a new checkpoint naming or format | `weights/` (files), `model/build.rs` (tensor names → layers), `model/gguf_config.rs` (GGUF metadata) |
//! | change how a config.json is read | `model/config/` |
//! | change temperature, top-p or other sampling | `sampling/` (ranges and precedence: the app's `config::sampling`) |
//! | change the chat template or how a turn is assembled | `tokenizer/template/`, `checkpoint.rs` (`LoadedModel::user_turn`) |

pub mod audio;
pub mod backend;
pub mod checkpoint;
pub mod deferred;
pub mod demo;
pub mod error;
pub mod model;
pub mod sampling;
pub mod tokenizer;
mod tower_ids;
mod tower_parts;
pub mod vision;
pub mod weights;

pub use error::{Error, Result};
