//! The quantized-type fixtures: tiny Gemma 4 files in three architectures, quantized by
//! llama.cpp's own `llama-quantize` to every GGML type (cached in the target directory while
//! their bytes match the ones `tests/fixtures/make_quant_fixtures.py` computed the reference on).

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::llama::llama_bin;

/// `tests/fixtures/quant`.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant")
}

/// One quantized file and what the reference says of it.
pub struct QuantFixture {
    /// Architecture (`e2b`, `moe`, `dense`).
    pub arch: String,
    /// GGML file type as `llama-quantize` names it (`Q4_K_M`…).
    pub ty: String,
    /// The file.
    pub path: PathBuf,
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    /// `reference.json`'s entry for the file (types, greedy ids, digest).
    pub meta: serde_json::Value,
}

/// Ids from a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Every architecture × type of `reference.json`, quantized (or taken from the cache).
pub fn quant_fixtures() -> Vec<QuantFixture> {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("reference.json")).expect("reference.json"),
    )
    .expect("json");
    let bin = llama_bin();
    let mut out = Vec::new();
    for (arch, entry) in meta["archs"].as_object().expect("archs") {
        for (ty, file) in entry["files"].as_object().expect("files") {
            out.push(QuantFixture {
                arch: arch.clone(),
                ty: ty.clone(),
                path: quantized(&bin, arch, ty, file["sha256"].as_str().expect("sha")),
                prompt: ids(&entry["prompt_ids"]),
                meta: file.clone(),
            });
        }
    }
    out
}

/// Runs `cmd`; its stdout, or a failure naming `what` with its stderr.
fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ARCH.TYPE.gguf`, quantized from the stored BF16 source (cached in the target directory while
/// its bytes still match the reference's).
fn quantized(bin: &Path, arch: &str, ty: &str, sha: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quant-fixtures");
    std::fs::create_dir_all(&dir).expect("cache dir");
    let out = dir.join(format!("{arch}.{ty}.gguf"));
    let digest = |p: &Path| {
        std::fs::read(p)
            .ok()
            .map(|b| format!("{:x}", Sha256::digest(&b)))
    };
    if digest(&out).as_deref() == Some(sha) {
        return out;
    }
    let source = root().join(format!("{arch}.bf16.gguf"));
    // Made beside it under a name of this call's own, then renamed over it: tests in this binary
    // and in others may ask for the same file at once, and none may read a half-written one.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let part = dir.join(format!("{arch}.{ty}.{}-{call}.part", std::process::id()));
    if ty == "BF16" {
        std::fs::copy(&source, &part).expect("copy");
    } else {
        let mut cmd = Command::new(bin.join("llama-quantize"));
        run_ok(
            cmd.arg(&source).arg(&part).arg(ty),
            &format!("llama-quantize {ty}"),
        );
    }
    std::fs::rename(&part, &out).expect("rename the quantized file into place");
    assert_eq!(
        digest(&out).as_deref(),
        Some(sha),
        "{arch} {ty}: llama-quantize made other bytes than the ones the reference was computed \
         on; rerun tests/fixtures/make_quant_fixtures.py with this llama.cpp"
    );
    out
}
