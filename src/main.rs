//! The `gemma-chat` binary: command-line parsing and the headless commands. Only this file uses
//! `anyhow`; the library returns typed errors.

mod cli;

use clap::Parser;

/// Keeps glibc's heap from holding on to freed memory: one arena (the engine's threads
/// allocate little; activations and scratch are large blocks) and a fixed 128 KiB threshold above
/// which blocks are mapped and given back when freed. Without it, the tokenizer's construction
/// garbage and freed activations stayed resident: 60 MB more peak RSS on the demo model.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_allocator() {
    const M_MMAP_THRESHOLD: i32 = -3;
    const M_ARENA_MAX: i32 = -8;
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    // SAFETY: mallopt only changes glibc malloc's tuning parameters; it is called before any
    // other thread exists.
    unsafe {
        mallopt(M_ARENA_MAX, 1);
        mallopt(M_MMAP_THRESHOLD, 128 << 10);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}

fn main() -> std::process::ExitCode {
    tune_allocator();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // An invalid config file is a usage error: exit code 2, as for a bad flag.
            let settings = matches!(
                e.downcast_ref::<gemma_chat::Error>(),
                Some(gemma_chat::Error::Settings(_))
            );
            std::process::ExitCode::from(if settings { 2 } else { 1 })
        }
    }
}
