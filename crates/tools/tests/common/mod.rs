//! What the tool host's tests share: the repository's root, the interpreter with PyPI's `mcp`
//! (made once by `scripts/mcp-python.sh`), and arguments written as JSON.
// Each test file uses its own subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The interpreter of the cached virtual environment with PyPI's `mcp`.
pub fn python() -> String {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/mcp-python.sh"))
        .output()
        .expect("runs scripts/mcp-python.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("a path")
        .trim()
        .to_string()
}

/// A call's arguments from a JSON object.
pub fn args(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}
