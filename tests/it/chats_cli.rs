//! `gemma-chat import` and `gemma-chat export` on a data dir of their own: a ChatGPT export comes
//! in as chats, goes out as Markdown (code kept) and JSON, and the JSON comes back in.

use std::path::Path;
use std::process::{Command, Output};

fn run(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gemma-chat"))
        .args(args)
        .env("GEMMA_CHAT_DATA_DIR", data)
        .output()
        .expect("runs")
}

const CHATGPT: &str = r#"[{"title": "Fizz", "current_node": "a", "mapping": {
  "u": {"parent": null, "children": ["a"],
        "message": {"author": {"role": "user"}, "content": {"parts": ["Write fizzbuzz"]}}},
  "a": {"parent": "u", "children": [],
        "message": {"author": {"role": "assistant"},
                    "content": {"parts": ["```python\nfor i in range(1, 16):\n    print(i)\n```"]}}}
}}]"#;

#[test]
fn chats_go_out_and_come_back_in() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let file = dir.path().join("conversations.json");
    std::fs::write(&file, CHATGPT).expect("write");
    let out = run(&data, &["import", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("imported 1 chat (\"Fizz\")"));
    let md = run(&data, &["export", "--format", "md"]);
    assert!(
        md.status.success(),
        "{}",
        String::from_utf8_lossy(&md.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&md.stdout),
        "# Fizz\n\n*gemma-chat · ChatGPT*\n\n## You\n\nWrite fizzbuzz\n\n## Gemma\n\n\
         ```python\nfor i in range(1, 16):\n    print(i)\n```\n\n"
    );
    let all = dir.path().join("out");
    let json = run(
        &data,
        &[
            "export",
            "--format",
            "json",
            "--all",
            &all.to_string_lossy(),
        ],
    );
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let written = all.join("Fizz.json");
    assert!(written.exists());
    let again = run(&data, &["import", &written.to_string_lossy()]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let chats = std::fs::read_dir(data.join("chats"))
        .expect("chats")
        .count();
    assert_eq!(chats, 2);
    // Bad input: a clear message and a failure.
    std::fs::write(&file, "[{\"title\": 3}]").expect("write");
    let bad = run(&data, &["import", &file.to_string_lossy()]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not a gemma-chat or ChatGPT chat"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let fmt = run(&data, &["export", "--format", "pdf"]);
    assert!(String::from_utf8_lossy(&fmt.stderr).contains("use md or json"));
}

/// `export PATH` makes a new file: an existing one is left as it is (exit 2) unless `--force`,
/// a link or a pipe is never replaced, `-` is standard output, and a `.tmp` planted beside the
/// target (a file of the user's, or a symlink) is neither touched nor followed.
#[test]
fn exports_never_replace_what_is_there() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let file = dir.path().join("conversations.json");
    std::fs::write(&file, CHATGPT).expect("write");
    assert!(
        run(&data, &["import", &file.to_string_lossy()])
            .status
            .success()
    );
    let target = dir.path().join("notes.md");
    std::fs::write(&target, "my notes").expect("write");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").expect("write");
    std::fs::write(dir.path().join("notes.tmp"), "also mine").expect("write");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&victim, dir.path().join("notes.md.tmp")).expect("link");
    let t = target.to_string_lossy().into_owned();
    let out = run(&data, &["export", &t]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "my notes");
    let out = run(&data, &["export", &t, "--force"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&target)
            .expect("read")
            .starts_with("# Fizz")
    );
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.tmp")).expect("read"),
        "also mine"
    );
    #[cfg(unix)]
    {
        let link = dir.path().join("out.md");
        std::os::unix::fs::symlink(&victim, &link).expect("link");
        for force in [false, true] {
            let mut args = vec!["export", link.to_str().expect("utf-8")];
            if force {
                args.push("--force");
            }
            let out = run(&data, &args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                std::fs::symlink_metadata(&link)
                    .expect("link")
                    .file_type()
                    .is_symlink()
            );
            assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
        }
    }
    let out = run(&data, &["export", "-"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("# Fizz"));
}
