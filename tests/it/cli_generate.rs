//! The headless `generate` command as scripts use it: `--ids`, `--json`, `--dump-logits`, and
//! its errors.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/oracle")
        .join(name)
}

fn reference_ids(dir: &Path, key: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v[key]
        .as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect()
}

#[test]
fn generate_json_and_dump_logits() {
    let dir = fixture("gemma4_moe");
    let prompt = reference_ids(&dir, "prompt_ids");
    let greedy = reference_ids(&dir, "greedy_ids");
    let ids: Vec<String> = prompt.iter().map(u64::to_string).collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dump = tmp.path().join("logits.safetensors");
    let out = bin()
        .args(["generate", "--model"])
        .arg(&dir)
        .args([
            "--ids",
            &ids.join(","),
            "--max-new-tokens",
            "4",
            "--temperature",
            "0",
        ])
        .args(["--json", "--chunk", "3", "--dump-logits"])
        .arg(&dump)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let got: Vec<u64> = v["generated_ids"]
        .as_array()
        .expect("generated_ids")
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect();
    // The fixture's eos is id 1; the reference never produced it in its first 4 tokens.
    assert_eq!(got, greedy[..4]);
    assert_eq!(
        v["prompt_ids"].as_array().expect("prompt_ids").len(),
        prompt.len()
    );
    assert!(v["timings"]["prefill_tok_s"].as_f64().expect("timing") > 0.0);
    assert!(v["text"].is_string());
    // The oracle path says which cache it ran with (the default f16, not transformers' f32).
    assert_eq!(v["kv_dtype"], "f16");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KV cache keeps f16") && stderr.contains("--kv-dtype f32"),
        "{stderr}"
    );

    let bytes = std::fs::read(&dump).expect("dump written");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let logits = st.tensor("logits").expect("logits tensor");
    assert_eq!(logits.dtype(), safetensors::Dtype::F32);
    assert_eq!(logits.shape(), &[prompt.len(), 512]);
}

#[test]
fn errors_are_clear_and_exit_nonzero() {
    let dir = fixture("gemma3");
    let model = dir.to_str().expect("utf-8 path");
    // Runs `generate --model <gemma3 fixture> ARGS`, which must fail, and returns its stderr.
    let fails = |args: &[&str]| {
        let out = bin()
            .args(["generate", "--model", model])
            .args(args)
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    #[cfg(not(feature = "wgpu"))]
    {
        let err = fails(&["--ids", "2,5", "--backend", "wgpu"]);
        assert!(err.contains("--features wgpu"), "{err}");
    }
    #[cfg(not(feature = "cuda"))]
    {
        let err = fails(&["--ids", "2,5", "--backend", "cuda"]);
        assert!(err.contains("--features cuda"), "{err}");
    }
    let err = fails(&["--ids", "2,5", "--backend", "tpu"]);
    assert!(
        err.contains("unknown backend") && err.contains("cpu"),
        "{err}"
    );
    let err = fails(&["--ids", "2,99999"]);
    assert!(err.contains("99999") && err.contains("vocabulary"), "{err}");
    let err = fails(&["--prompt", "hi"]);
    assert!(
        err.contains("tokenizer.json") && err.contains("--ids"),
        "{err}"
    );
    let err = fails(&["--ids", "2", "--temperature", "3"]);
    assert!(err.contains("temperature"), "{err}");
    let err = fails(&["--ids", "2", "--dtype", "fp8"]);
    assert!(err.contains("f32, f16 or bf16"), "{err}");
}

/// Text the user did not write reaches the terminal without control characters: a template's
/// `raise_exception` message here (model text goes through the same filter; `--raw` keeps it).
#[test]
fn errors_and_headless_text_carry_no_escape_sequences() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let template = tmp.path().join("t.jinja");
    std::fs::write(
        &template,
        "{{ raise_exception('bad \u{1b}]0;pwned\u{7} \u{1b}[2J template') }}",
    )
    .expect("write");
    let messages = tmp.path().join("m.json");
    std::fs::write(&messages, r#"[{"role": "user", "content": "Hi"}]"#).expect("write");
    let out = bin()
        .args(["template", "render", "--template"])
        .arg(&template)
        .arg("--messages")
        .arg(&messages)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad") && err.contains("template"), "{err}");
    assert!(
        !err.chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{err:?}"
    );
}

/// An I/O error names the file and its cause once.
#[test]
fn an_io_error_says_its_cause_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    #[cfg(unix)]
    std::os::unix::fs::symlink(tmp.path().join("gone.json"), tmp.path().join("config.json"))
        .expect("symlink");
    let out = bin()
        .args(["generate", "--ids", "2", "--model"])
        .arg(tmp.path())
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("os error").count(), 1, "{err}");
}
