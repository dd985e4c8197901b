//! The `gemma-chat` binary, on top of the workspace: command-line parsing, and every command
//! (`src/cli/`): the TUI and the headless chat through the engine protocol, `generate`, `bench`,
//! `config`, `template`, `export` and `import`. Only the binary uses `anyhow`; the crates return
//! typed errors.

mod cli;

fn main() -> std::process::ExitCode {
    let args = cli::parse();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // An error may quote a file or a template: no control character reaches the
            // terminal.
            eprintln!("error: {}", cli::printable(&format!("{e:#}"), false));
            // An invalid config file is a usage error: exit code 2, as for a bad flag.
            let settings = matches!(
                e.downcast_ref::<gemma_app::Error>(),
                Some(gemma_app::Error::Settings(_))
            );
            std::process::ExitCode::from(if settings { 2 } else { 1 })
        }
    }
}
