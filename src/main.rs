//! The `gemma-chat` binary: command-line parsing and the headless commands. Only this file uses
//! `anyhow`; the library returns typed errors.

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
                e.downcast_ref::<gemma_chat::Error>(),
                Some(gemma_chat::Error::Settings(_))
            );
            std::process::ExitCode::from(if settings { 2 } else { 1 })
        }
    }
}
