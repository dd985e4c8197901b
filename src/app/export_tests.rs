use super::*;

fn msg(role: &str, text: &str) -> SavedMessage {
    SavedMessage::new(role, text)
}

fn chat() -> SavedChat {
    let mut answer = msg(
        "model",
        "Use a loop:\n\n```rust\nfor i in 0..3 {\n    println!(\"{i}\");\n}\n```\n",
    );
    answer.thought = "They want Rust.".into();
    answer.footer = Some("done · new · reused 0 · prefilled 12".into());
    SavedChat {
        version: VERSION,
        order: 0,
        title: "Loops / in Rust?".into(),
        model: "gemma-3-270m (demo)".into(),
        thinking: false,
        messages: vec![
            msg("system", "Be brief."),
            msg("user", "How do I count to 3?"),
            answer,
            msg("notice", "thinking on"),
        ],
        ..SavedChat::default()
    }
}

#[test]
fn markdown_keeps_code_blocks_and_folds_thoughts() {
    let md = markdown(&chat());
    assert_eq!(
        md,
        "# Loops / in Rust?\n\n*gemma-chat · gemma-3-270m (demo)*\n\n## System prompt\n\nBe brief.\n\n\
         ## You\n\nHow do I count to 3?\n\n## Gemma\n\n<details><summary>Thought</summary>\n\n\
         They want Rust.\n\n</details>\n\nUse a loop:\n\n```rust\nfor i in 0..3 {\n    \
         println!(\"{i}\");\n}\n```\n\n*done · new · reused 0 · prefilled 12*\n\n> thinking on\n\n"
    );
    assert_eq!(file_stem(&chat()), "Loops---in-Rust");
}

#[test]
fn json_round_trips_through_import() {
    let text = export(&chat(), Format::Json);
    let back = import(&text).expect("imports");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].messages, chat().messages);
    assert_eq!(back[0].title, chat().title);
    // A list of chats too.
    let two = format!("[{text},{text}]");
    assert_eq!(import(&two).expect("imports").len(), 2);
}

#[test]
fn chatgpt_exports_follow_the_current_branch() {
    // An edited conversation: the first user message has two versions; current_node is on the
    // second.
    let text = r#"[{
        "title": "Sky",
        "current_node": "a2",
        "mapping": {
            "root": {"id": "root", "message": null, "parent": null, "children": ["s"]},
            "s": {"id": "s", "parent": "root", "children": ["u1", "u2"],
                  "message": {"author": {"role": "system"}, "content": {"content_type": "text", "parts": [""]}}},
            "u1": {"id": "u1", "parent": "s", "children": ["a1"],
                   "message": {"author": {"role": "user"}, "content": {"content_type": "text", "parts": ["Why is the sky blue"]}}},
            "a1": {"id": "a1", "parent": "u1", "children": [],
                   "message": {"author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["Old answer"]}}},
            "u2": {"id": "u2", "parent": "s", "children": ["t", "a2"],
                   "message": {"author": {"role": "user"}, "content": {"content_type": "text", "parts": ["Why is the sky blue?"]}}},
            "t": {"id": "t", "parent": "u2", "children": [],
                  "message": {"author": {"role": "tool"}, "content": {"content_type": "text", "parts": ["search results"]}}},
            "a2": {"id": "a2", "parent": "u2", "children": [],
                   "message": {"author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["Rayleigh scattering."]}}}
        }
    }]"#;
    let chats = import(text).expect("imports");
    assert_eq!(chats.len(), 1);
    assert_eq!(chats[0].title, "Sky");
    assert_eq!(
        chats[0].messages,
        vec![
            msg("user", "Why is the sky blue?"),
            msg("model", "Rayleigh scattering.")
        ]
    );
}

#[test]
fn bad_imports_say_why() {
    assert!(import("{").expect_err("not JSON").starts_with("not JSON"));
    assert!(
        import(r#"[{"title": 3}]"#)
            .expect_err("not a chat")
            .contains("not a gemma-chat or ChatGPT chat")
    );
    assert_eq!(
        import(r#"[{"title": "empty", "mapping": {}}]"#).expect_err("empty"),
        "no chat with messages in it"
    );
    let looping = r#"[{"title": "x", "current_node": "a", "mapping": {
        "a": {"parent": "b", "message": null}, "b": {"parent": "a", "message": null}}}]"#;
    assert!(import(looping).expect_err("loop").contains("loop"));
}
