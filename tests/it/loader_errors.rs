//! Bad checkpoints give errors that say what is wrong and where: a missing tensor, a mis-shaped
//! one, a truncated file, a broken config. KV-shared layers load with or without their unused
//! K/V tensors (the e2b-style fixture carries them, the e4b-style one does not).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use gemma_model::checkpoint::load;
use gemma_model::model::ComputeDtype;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/oracle")
        .join(name)
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for e in std::fs::read_dir(from).expect("read fixture") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, dir.path().join(p.file_name().expect("name"))).expect("copy");
    }
    dir
}

/// Rewrites `model.safetensors` in `dir` through `edit`.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut HashMap<String, (Vec<usize>, Vec<u8>)>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let st = SafeTensors::deserialize(&bytes).expect("parse");
    let mut map: HashMap<String, (Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, (v.shape().to_vec(), v.data().to_vec())))
        .collect();
    edit(&mut map);
    let views: Vec<(String, TensorView)> = map
        .iter()
        .map(|(n, (s, d))| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), d).expect("view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &path).expect("write");
}

fn load_err(dir: &Path) -> String {
    load(dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {})
        .expect_err("loading must fail")
        .to_string()
}

#[test]
fn a_missing_tensor_names_itself_its_shape_and_the_file() {
    let dir = copy_dir(&fixture("gemma4_moe"));
    rewrite(dir.path(), |m| {
        m.remove("model.layers.1.mlp.up_proj.weight");
    });
    let err = load_err(dir.path());
    assert!(err.contains("layers.1.mlp.up_proj.weight"), "{err}");
    assert!(err.contains("[96, 64]"), "{err}");
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn a_misshaped_tensor_says_both_shapes() {
    let dir = copy_dir(&fixture("gemma4_moe"));
    rewrite(dir.path(), |m| {
        let t = m
            .get_mut("model.layers.0.mlp.up_proj.weight")
            .expect("up_proj");
        t.0 = vec![t.0[1], t.0[0]];
    });
    let err = load_err(dir.path());
    assert!(err.contains("layers.0.mlp.up_proj.weight"), "{err}");
    assert!(
        err.contains("[64, 96]") && err.contains("expected [96, 64]"),
        "{err}"
    );
}

#[test]
fn a_truncated_file_is_reported_not_a_panic() {
    let dir = copy_dir(&fixture("gemma3"));
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    let err = load_err(dir.path());
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn a_broken_config_is_reported_with_its_path() {
    let dir = copy_dir(&fixture("gemma3"));
    std::fs::write(
        dir.path().join("config.json"),
        "{\"model_type\": \"gemma3_text\"",
    )
    .expect("w");
    let err = load_err(dir.path());
    assert!(err.contains("config.json") && err.contains("JSON"), "{err}");
    std::fs::remove_file(dir.path().join("config.json")).expect("rm");
    let err = load_err(dir.path());
    assert!(err.contains("config.json"), "{err}");
}

#[test]
fn a_missing_model_dir_says_so() {
    let err = load_err(Path::new("/nonexistent/gemma"));
    assert!(
        err.contains("/nonexistent/gemma") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn unused_kv_tensors_on_shared_layers_are_optional() {
    for name in ["gemma4_e2b_style", "gemma4_e4b_style"] {
        let dir = fixture(name);
        let bytes = std::fs::read(dir.join("model.safetensors")).expect("read");
        let st = SafeTensors::deserialize(&bytes).expect("parse");
        let has = st
            .names()
            .iter()
            .any(|n| n == &"model.layers.5.self_attn.k_proj.weight");
        assert_eq!(has, name == "gemma4_e2b_style");
        load(&dir, &Device::flex(), ComputeDtype::F32, &mut |_, _| {}).expect("loads");
    }
}

/// A directory with two GGUF files asks which one; a device or FIFO is not taken for a
/// directory.
#[test]
fn ambiguous_or_odd_model_paths_say_what_to_do() {
    let dir = tempfile::tempdir().expect("tmp");
    for name in ["a.gguf", "b.gguf"] {
        std::fs::write(dir.path().join(name), b"GGUF").expect("write");
    }
    let err = gemma_model::checkpoint::load(
        dir.path(),
        &burn::tensor::Device::flex(),
        gemma_model::model::ComputeDtype::F32,
        &mut |_, _| {},
    )
    .expect_err("two files")
    .to_string();
    assert!(
        err.contains("2 .gguf files") && err.contains("a.gguf, b.gguf"),
        "{err}"
    );
    let err = gemma_model::checkpoint::load(
        std::path::Path::new("/dev/null"),
        &burn::tensor::Device::flex(),
        gemma_model::model::ComputeDtype::F32,
        &mut |_, _| {},
    )
    .expect_err("a device")
    .to_string();
    assert!(err.contains("neither a file nor a directory"), "{err}");
}
