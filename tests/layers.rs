//! The layering, enforced: each top-level module of the library may use only the modules below
//! it (and itself). Bottom to top:
//!
//! error, files → backend → loader → model → tokenizer, sampling → load, demo → engine → config →
//! app → ui → tui (and the `gemma-chat` binary, `src/cli`, on top of everything).
//!
//! `engine::protocol`, what the UI and every engine (local or remote) share, is a leaf: it owns
//! its types and uses nothing but the error and sampling types. A `crate::…` path in code (not in
//! comments) that points up or sideways fails this test with the file and the line.

use std::path::{Path, PathBuf};

/// Each module's layer; a module may use modules of a lower layer only.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("files", 0),
    ("backend", 1),
    ("loader", 2),
    ("model", 3),
    ("tokenizer", 4),
    ("sampling", 4),
    ("load", 5),
    ("demo", 5),
    ("engine", 6),
    ("config", 7),
    ("app", 8),
    ("ui", 9),
    ("tui", 10),
];

/// Modules `engine::protocol` may use.
const PROTOCOL_USES: &[&str] = &["error", "sampling"];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules a line of code names as `crate::name`.
fn used_modules(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or("");
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // Not part of a longer name such as `gemma_crate::`.
            code[..*at]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .filter_map(|(at, m)| {
            let rest = &code[at + m.len()..];
            let name: &str = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()?;
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Every forbidden use in the library's sources: `file:line: module uses dependency`.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main" | "cli") {
            continue;
        }
        let own = layer(&top).unwrap_or_else(|| {
            panic!(
                "{}: module `{top}` has no layer in tests/layers.rs",
                rel.display()
            )
        });
        let protocol = rel == Path::new("engine/protocol.rs");
        let text = std::fs::read_to_string(&file).expect("read");
        for (n, line) in text.lines().enumerate() {
            for dep in used_modules(line) {
                let dep = match dep {
                    "Error" | "Result" => "error",
                    d => d,
                };
                let Some(theirs) = layer(dep) else { continue };
                let allowed = if protocol {
                    PROTOCOL_USES.contains(&dep)
                } else {
                    dep == top || theirs < own
                };
                if !allowed {
                    found.push(format!("{}:{}: {top} uses {dep}", rel.display(), n + 1));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_uses_a_module_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports against the layering:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_finds_a_use_that_points_up() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path();
    std::fs::create_dir_all(src.join("engine")).expect("dir");
    std::fs::create_dir_all(src.join("app")).expect("dir");
    std::fs::write(
        src.join("engine/worker.rs"),
        "use crate::model::Gemma;\n// crate::app in a comment is fine\nuse crate::app::persist;\n",
    )
    .expect("write");
    std::fs::write(
        src.join("engine/protocol.rs"),
        "use crate::sampling::SamplingParams;\nuse crate::model::Gemma;\n",
    )
    .expect("write");
    std::fs::write(src.join("app/tab.rs"), "use crate::ui::theme::Theme;\n").expect("write");
    assert_eq!(
        violations(src),
        [
            "app/tab.rs:1: app uses ui",
            "engine/protocol.rs:2: engine uses model",
            "engine/worker.rs:3: engine uses app",
        ]
    );
}
