//! GGUF files that cannot be used say why: a truncated file, an unknown tensor type, an
//! unsupported architecture.

use std::path::Path;

use crate::common::gguf::{V, gguf};
use gemma_model::model::gguf_config::model_config;
use gemma_model::weights::gguf::GgufFile;

/// A minimal GGUF v3 file: `kv` string metadata and one tensor at offset 0.
fn write_gguf(path: &Path, kv: &[(&str, &str)], tensor: (&str, &[u64], u32), data: usize) {
    let kv: Vec<(&str, V)> = kv.iter().map(|&(k, v)| (k, V::Str(v))).collect();
    let bytes = gguf(&kv, &[(tensor.0, tensor.1, tensor.2, 0)], data);
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn an_unknown_tensor_type_names_the_tensor_and_type() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.gguf");
    write_gguf(
        &path,
        &[("general.architecture", "gemma3")],
        ("token_embd.weight", &[256, 4], 16),
        4096,
    );
    let file = GgufFile::open(&path).expect("header is fine");
    let err = file
        .dequantize("token_embd.weight")
        .expect_err("IQ2_XXS")
        .to_string();
    // The type by name, and the supported list.
    assert!(
        err.contains("token_embd.weight") && err.contains("IQ2_XXS") && err.contains("IQ4_XS"),
        "{err}"
    );
}

/// A FIFO (named as `--mmproj` or `--model`) is refused at once, not opened: opening one waits
/// for a writer for ever (probe 2026-12-06, F6).
#[test]
fn a_pipe_or_device_is_refused_without_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("mmproj-fifo.gguf");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    for path in [fifo, "/dev/zero".into()] {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(GgufFile::open(&p).map(|_| ()).map_err(|e| e.to_string()));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{} is still being opened", path.display()));
        let err = got.expect_err("not a GGUF file");
        assert!(err.contains("not a regular file"), "{err}");
    }
}

#[test]
fn a_truncated_file_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.gguf");
    write_gguf(
        &path,
        &[("general.architecture", "gemma3")],
        ("token_embd.weight", &[64, 4], 0),
        100,
    );
    let err = GgufFile::open(&path).expect_err("data missing").to_string();
    assert!(
        err.contains("truncated") && err.contains("token_embd.weight"),
        "{err}"
    );
    std::fs::write(&path, b"GGUF\x03\x00\x00\x00\x01").expect("write");
    let err = GgufFile::open(&path).expect_err("header cut").to_string();
    assert!(err.contains("truncated"), "{err}");
    std::fs::write(&path, b"not a gguf").expect("write");
    let err = GgufFile::open(&path).expect_err("bad magic").to_string();
    assert!(err.contains("not a GGUF file"), "{err}");
}

#[test]
fn other_architectures_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.gguf");
    write_gguf(
        &path,
        &[("general.architecture", "llama")],
        ("token_embd.weight", &[64, 4], 0),
        1024,
    );
    let file = GgufFile::open(&path).expect("opens");
    let err = model_config(&file).expect_err("llama").to_string();
    assert!(err.contains("llama") && err.contains("gemma3"), "{err}");
}
