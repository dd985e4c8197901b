//! The layering, kept by Cargo: each crate of the workspace can use only the crates its manifest
//! names, so an import that points up does not compile. What Cargo cannot see is a manifest that
//! names a crate it should not; this test reads every manifest and fails on a dependency (normal,
//! dev or target-specific) that points up or sideways. Bottom to top:
//!
//! protocol, files, media → kernels → model; protocol → tools (MCP, built-ins, the call
//! grammar); model and tools → engine; app (protocol, files, media and the tools' settings
//! only: the front end never sees the engine or the model, it reads a picture's header for its
//! chip and the tools crate without its host, see [`CONFIG_ONLY`]) → the `gemma-chat` binary on
//! top of everything.

use std::path::Path;

/// Each workspace crate and the workspace crates it may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    ("gemma-protocol", &[]),
    ("gemma-files", &[]),
    ("gemma-media", &["gemma-files"]),
    ("gemma-kernels", &[]),
    ("gemma-tools", &["gemma-protocol"]),
    ("gemma-model", &["gemma-protocol", "gemma-kernels"]),
    (
        "gemma-engine",
        &[
            "gemma-protocol",
            "gemma-files",
            "gemma-media",
            "gemma-model",
            "gemma-tools",
        ],
    ),
    ("gemma-serve", &["gemma-protocol"]),
    (
        "gemma-app",
        &[
            "gemma-protocol",
            "gemma-files",
            "gemma-media",
            "gemma-tools",
        ],
    ),
];

/// A crate that may take a dependency only without one of its features: the app reads the
/// tools' settings, and must not link their host (the MCP client, HTTP, child processes).
const CONFIG_ONLY: &[(&str, &str, &str)] = &[("gemma-app", "gemma-tools", "host")];

/// The features a manifest's `[dependencies]` entry for `dep` turns on.
fn features_of(manifest: &toml::Table, dep: &str) -> Vec<String> {
    let entry = manifest
        .get("dependencies")
        .and_then(|d| d.get(dep))
        .and_then(|e| e.as_table());
    let features = entry
        .and_then(|e| e.get("features"))
        .and_then(|f| f.as_array());
    features
        .map(|f| {
            f.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The workspace crates a manifest's dependency tables name.
fn workspace_deps(manifest: &toml::Table) -> Vec<String> {
    let mut tables: Vec<&toml::Table> = Vec::new();
    for key in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(t) = manifest.get(key).and_then(|v| v.as_table()) {
            tables.push(t);
        }
    }
    if let Some(targets) = manifest.get("target").and_then(|v| v.as_table()) {
        for target in targets.values().filter_map(|v| v.as_table()) {
            for key in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(t) = target.get(key).and_then(|v| v.as_table()) {
                    tables.push(t);
                }
            }
        }
    }
    let mut names: Vec<String> = tables
        .iter()
        .flat_map(|t| t.keys())
        .filter(|k| k.starts_with("gemma-"))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every dependency of a workspace crate that its layer does not allow, as `crate → dep`.
fn violations(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let manifest = entry.expect("entry").path().join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let m: toml::Table = toml::from_str(&text).expect("valid manifest");
        let name = m["package"]["name"].as_str().expect("name").to_string();
        let allowed = ALLOWED
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{name} has no layer in tests/it/layers.rs"))
            .1;
        for dep in workspace_deps(&m) {
            if !allowed.contains(&dep.as_str()) {
                found.push(format!("{name} → {dep}"));
            }
        }
        for (_, dep, feature) in CONFIG_ONLY.iter().filter(|(n, _, _)| *n == name) {
            if features_of(&m, dep).iter().any(|f| f == feature) {
                found.push(format!("{name} → {dep} ({feature})"));
            }
        }
        seen.push(name);
    }
    seen.sort();
    let mut all: Vec<&str> = ALLOWED.iter().map(|(n, _)| *n).collect();
    all.sort();
    assert_eq!(
        seen, all,
        "the workspace's crates and the layers listed here"
    );
    found.sort();
    found
}

#[test]
fn no_crate_depends_on_a_crate_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = violations(root);
    assert!(
        found.is_empty(),
        "dependencies that point up or sideways:\n{}",
        found.join("\n")
    );
}

/// The check itself catches a planted upward dependency: the app crate naming the engine.
#[test]
fn a_planted_upward_dependency_is_caught() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let dir = entry.expect("entry").path();
        let name = dir.file_name().expect("name").to_owned();
        let to = tmp.path().join("crates").join(&name);
        std::fs::create_dir_all(&to).expect("dir");
        let mut text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
        if name == "app" {
            text = text.replace(
                "[dependencies]\n",
                "[dependencies]\ngemma-engine.workspace = true\n",
            );
            text = text.replace(
                "gemma-tools.workspace = true",
                "gemma-tools = { workspace = true, features = [\"host\"] }",
            );
        }
        if name == "model" {
            text.push_str("\n[target.'cfg(unix)'.dev-dependencies]\ngemma-app.workspace = true\n");
        }
        std::fs::write(to.join("Cargo.toml"), text).expect("write");
    }
    let found = violations(tmp.path());
    assert_eq!(
        found,
        [
            "gemma-app → gemma-engine",
            "gemma-app → gemma-tools (host)",
            "gemma-model → gemma-app"
        ],
        "{found:?}"
    );
}
