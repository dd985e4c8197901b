//! Every integration test of the `gemma-chat` package in one binary (one link instead of one
//! per file): the binary's commands, the engine on the oracle fixtures and the demo model, the
//! remote engine against llama-server, and the workspace's layering. Each file is a module;
//! `cargo test --release --test it -- oracle::` runs one of them.

mod audio_chat;
mod audio_oracle;
mod branches;
mod chat_history;
mod chats_cli;
mod cli_generate;
mod common;
mod compaction;
mod config;
mod config_forms;
mod demo_model;
mod engine;
mod fuzz;
mod gguf_errors;
mod gguf_oracle;
mod headless;
mod hostile_files;
mod kv_oracle;
mod layers;
mod loader_errors;
mod oracle;
mod quant_blocks;
mod quant_types;
mod rebuilt_media;
mod rebuilt_tools;
mod remote;
mod remote_compact;
mod remote_faults;
mod remote_hostile;
mod remote_tools;
mod serve;
mod serve_media;
mod serve_tools;
mod sessions;
mod speculate;
mod templates;
mod thinking_budget;
mod tools;
mod tui_e2e;
mod user_text;
mod vision_chat;
mod vision_oracle;
