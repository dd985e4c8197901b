//! The `gemma-chat` binary, on top of the workspace: command-line parsing, and every command
//! (`src/cli/`): the TUI and the headless chat through the engine protocol, `generate`, `bench`,
//! `config`, `template`, `export`, `import` and `mcp`. Only the binary uses `anyhow`; the crates
//! return typed errors.

mod cli;

use std::io::Write as _;

fn main() -> std::process::ExitCode {
    // A prefill's activations reuse the heap's pages instead of fresh mappings.
    gemma_model::backend::reuse_large_buffers();
    let args = cli::parse();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A reader that went away (`| head`): quietly, as Unix tools end.
            let closed = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if closed {
                return std::process::ExitCode::from(1);
            }
            // An error may quote a file or a template: no control character reaches the
            // terminal. Writing it may fail too (stderr closed): nothing more can be said.
            let _ = writeln!(
                std::io::stderr(),
                "error: {}",
                cli::printable(&format!("{e:#}"), false)
            );
            // An invalid config file, or a request refused as given, is a usage error: exit code 2,
            // as for a bad flag.
            let settings = matches!(
                e.downcast_ref::<gemma_app::Error>(),
                Some(gemma_app::Error::Settings(_))
            ) || e.downcast_ref::<cli::Refused>().is_some();
            std::process::ExitCode::from(if settings { 2 } else { 1 })
        }
    }
}
