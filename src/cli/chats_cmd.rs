//! `gemma-chat export` and `gemma-chat import`: the saved chats out as Markdown or JSON (one, or
//! all into a folder), and chats in from our JSON or ChatGPT's `conversations.json`, as new tabs
//! for the next start.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use gemma_app::chats::export::{self, Format};
use gemma_app::chats::{SavedChat, load_chats};
use gemma_files::{DirLock, create_private_dir, write_atomic, write_new};
use gemma_model::demo;

/// `export`'s options.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// md (Markdown to read) or json (the chat with its messages, thoughts and stats lines).
    #[arg(long, default_value = "md")]
    format: String,
    /// Every saved chat, one file each, into the folder PATH (made if missing).
    #[arg(long)]
    all: bool,
    /// Where to write: a new file (`-` or none: standard output; the most recently saved chat),
    /// or with --all a folder. An existing file is left alone unless --force.
    path: Option<PathBuf>,
    /// Replace an existing file (never anything but a regular file).
    #[arg(long)]
    force: bool,
}

/// `import`'s options.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A chat exported as JSON by gemma-chat, or ChatGPT's conversations.json.
    file: PathBuf,
}

/// Most bytes of a file to import.
const IMPORT_LIMIT: u64 = 1 << 30;

fn chats_dir() -> anyhow::Result<PathBuf> {
    Ok(demo::data_dir()?.join("chats"))
}

/// Runs `export`.
pub fn export(args: ExportArgs, raw: bool) -> anyhow::Result<()> {
    let format = Format::parse(&args.format)
        .with_context(|| format!("--format {}: use md or json", args.format))?;
    let dir = chats_dir()?;
    let (mut chats, warnings) = load_chats(&dir);
    for w in warnings {
        errln!("{w}");
    }
    anyhow::ensure!(!chats.is_empty(), "no saved chats in {}", dir.display());
    if args.all {
        let out = args.path.context(
            "--all writes one file per chat: name the folder, e.g. `export --all chats/`",
        )?;
        create_private_dir(&out).with_context(|| format!("creating {}", out.display()))?;
        chats.sort_by_key(|(_, c)| c.order);
        for (_, chat) in &chats {
            // Each file is written before the next name is chosen: names never repeat.
            let path = export::free_name(&out, &export::file_stem(chat), format.extension());
            write_new(&path, export::export(chat, format).as_bytes(), false)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        errln!("exported {} chats to {}", chats.len(), out.display());
        return Ok(());
    }
    let newest = newest(&dir, chats).context("no saved chats")?;
    let text = export::export(&newest, format);
    match args.path.filter(|p| p.as_os_str() != "-") {
        Some(p) => {
            write_new(&p, text.as_bytes(), args.force).map_err(|e| refused(&p, e))?;
            errln!(
                "exported \"{}\" to {}",
                gemma_app::chats::fmt::short(&newest.title),
                p.display()
            );
        }
        None => out!("{}", super::printable(&text, raw))?,
    }
    Ok(())
}

/// An export's write error: an existing file or one that is not a regular file is a refusal
/// (exit code 2) that says what to do; anything else says what failed.
fn refused(path: &Path, e: std::io::Error) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::AlreadyExists => super::Refused(format!(
            "{} exists and is left as it is: name another file, or pass --force to replace it",
            path.display()
        ))
        .into(),
        std::io::ErrorKind::InvalidInput => {
            super::Refused(format!("{e}; name a new file, or `-` for standard output")).into()
        }
        _ => anyhow::Error::new(e).context(format!("writing {}", path.display())),
    }
}

/// The most recently saved of `chats` (by its file's time).
fn newest(dir: &Path, chats: Vec<(String, SavedChat)>) -> Option<SavedChat> {
    chats
        .into_iter()
        .max_by_key(|(uid, _)| {
            std::fs::metadata(dir.join(format!("{uid}.json")))
                .and_then(|m| m.modified())
                .ok()
        })
        .map(|(_, c)| c)
}

/// Runs `import`.
pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    // ChatGPT's exports run to hundreds of MB; more than this is not a chat archive.
    let text = super::read_text(&args.file, IMPORT_LIMIT)?;
    let export::Imported { chats, notes } =
        export::import(&text).map_err(|why| anyhow::anyhow!("{}: {why}", args.file.display()))?;
    for n in &notes {
        errln!("note: {n}");
    }
    let data = demo::data_dir()?;
    // Not while gemma-chat runs on this data dir: it would overwrite the chat list on quit.
    let _lock = DirLock::acquire(&data)?;
    let dir = data.join("chats");
    create_private_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    for (i, chat) in chats.iter().enumerate() {
        let path = dir.join(format!("chat-{ms}-import{i}.json"));
        let bytes = serde_json::to_vec_pretty(chat)?;
        write_atomic(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    errln!(
        "imported {} chat{} ({}); they open as tabs when gemma-chat starts",
        chats.len(),
        if chats.len() == 1 { "" } else { "s" },
        chats
            .iter()
            .take(5)
            .map(|c| format!("{:?}", gemma_app::chats::fmt::short(&c.title)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
