use super::*;
use crate::chats::SavedMessage;

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
    let back = import(&text).expect("imports").chats;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].messages, chat().messages);
    assert_eq!(back[0].title, chat().title);
    // A list of chats too.
    let two = format!("[{text},{text}]");
    assert_eq!(import(&two).expect("imports").chats.len(), 2);
}

#[test]
fn chatgpt_exports_come_as_trees_on_the_current_branch() {
    // An edited conversation: the first user message has two versions; current_node is on the
    // second, and the first version (with its answer) comes as a branch.
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
    let chats = import(text).expect("imports").chats;
    assert_eq!(chats.len(), 1);
    assert_eq!(chats[0].title, "Sky");
    let shape = |ms: &[SavedMessage]| -> Vec<(u64, Option<u64>, String, String)> {
        ms.iter()
            .map(|m| (m.id, m.parent, m.role.clone(), m.text.clone()))
            .collect()
    };
    assert_eq!(
        shape(&chats[0].messages),
        [
            (3, None, "user".into(), "Why is the sky blue?".into()),
            (4, Some(3), "model".into(), "Rayleigh scattering.".into())
        ]
    );
    assert_eq!(chats[0].branches.len(), 1);
    assert_eq!(chats[0].branches[0].parent, 0);
    assert_eq!(
        shape(&chats[0].branches[0].messages),
        [
            (1, None, "user".into(), "Why is the sky blue".into()),
            (2, Some(1), "model".into(), "Old answer".into())
        ]
    );
    // Loaded, the message shows as version 2 of 2, and version 1 brings its answer back.
    let (path, branches) =
        crate::app::chat_tree::tree(chats[0].messages.clone(), chats[0].branches.clone());
    let mut t = crate::app::tab::Tab::new(1, "t".into(), Default::default());
    t.messages = path;
    t.branches = branches;
    t.refresh_versions();
    assert_eq!(t.messages[0].versions, Some((2, 2)));
    assert_eq!(t.cycle_version(0, -1), Some((1, 2)));
    assert_eq!(t.messages[1].text, "Old answer");
}

/// Regenerated answers under one message, written in this order: versions in that order,
/// whatever their keys, and a branch of a branch keeps its place.
#[test]
fn chatgpt_versions_follow_the_order_they_were_written() {
    let node = |id: &str, parent: &str, role: &str, text: &str, t: f64| {
        format!(
            r#""{id}": {{"id": "{id}", "parent": {parent}, "message": {{"author": {{"role": "{role}"}},
               "create_time": {t}, "content": {{"parts": ["{text}"]}}}}}}"#
        )
    };
    let nodes = [
        node("z", "null", "user", "Hi", 1.0),
        node("c", "\"z\"", "assistant", "first", 2.0),
        node("b", "\"z\"", "assistant", "second", 3.0),
        node("a", "\"z\"", "assistant", "third", 4.0),
        node("q", "\"c\"", "user", "more", 5.0),
        node("r", "\"q\"", "assistant", "sure", 6.0),
    ];
    let text = format!(
        r#"[{{"title": "Hi", "current_node": "b", "mapping": {{{}}}}}]"#,
        nodes.join(",")
    );
    let chat = &import(&text).expect("imports").chats[0];
    let (path, branches) =
        crate::app::chat_tree::tree(chat.messages.clone(), chat.branches.clone());
    let mut t = crate::app::tab::Tab::new(1, "t".into(), Default::default());
    t.messages = path;
    t.branches = branches;
    t.refresh_versions();
    assert_eq!(t.messages[1].text, "second");
    assert_eq!(t.messages[1].versions, Some((2, 3)));
    assert_eq!(t.cycle_version(1, -1), Some((1, 3)));
    let texts: Vec<&str> = t.messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Hi", "first", "more", "sure"]);
    assert_eq!(t.cycle_version(1, -1), Some((3, 3)));
    assert_eq!(t.messages[1].text, "third");
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

/// What an import leaves out or changes is said, a line a thing, naming the chat: a current
/// message that is not there (the chat is shown on its last branch, not dropped), tool messages,
/// a chat with nothing in it.
#[test]
fn an_import_says_what_it_left_out() {
    let text = r#"[
        {"title": "Lost \u001b[2J", "current_node": "nowhere", "mapping": {
            "a": {"parent": null, "message": {"author": {"role": "user"}, "content": {"parts": ["Hi"]}}},
            "t": {"parent": "a", "message": {"author": {"role": "tool"}, "content": {"parts": ["{}"]}}},
            "b": {"parent": "t", "message": {"author": {"role": "assistant"}, "content": {"parts": ["Hello"]}}}}},
        {"title": "Empty", "mapping": {"x": {"parent": null, "message": null}}}
    ]"#;
    let got = import(text).expect("imports");
    assert_eq!(got.chats.len(), 1);
    let texts: Vec<&str> = got.chats[0]
        .messages
        .iter()
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(texts, ["Hi", "Hello"]);
    assert_eq!(
        got.notes,
        [
            "chat 1 (\"Lost [2J\"): its current message (\"nowhere\") is not among its messages: \
             shown on its last branch",
            "chat 1 (\"Lost [2J\"): 1 tool, hidden, system or empty message left out",
            "chat 2 (\"Empty\"): no user or model message on it; left out",
        ]
    );
}

/// A picture or recording is linked by its path percent-encoded: a name with spaces, brackets
/// or control characters still names the file (probe 2026-12-06, F10).
#[test]
fn attachments_are_linked_by_their_encoded_path() {
    let mut user = msg("user", "What is this?");
    let image = |path: &str, audio: bool| crate::chats::SavedImage {
        path: path.into(),
        tokens: 280,
        size: (64, 64),
        audio: audio.then_some(crate::chats::format::SavedSound {
            ms: 1200,
            tokens: 30,
            pieces: 1,
        }),
    };
    user.images = vec![
        image("/home/u/my pics/cat (1).png", false),
        image("/tmp/e\u{1b}[31mvil>.png", false),
        image("/home/u/rec-1.wav", true),
    ];
    let chat = SavedChat {
        messages: vec![user],
        ..chat()
    };
    let md = markdown(&chat);
    assert!(md.contains("(/home/u/my%20pics/cat%20%281%29.png)"), "{md}");
    assert!(md.contains("(/tmp/e%1B%5B31mvil%3E.png)"), "{md}");
    assert!(md.contains("[audio: rec-1.wav](/home/u/rec-1.wav)"), "{md}");
    assert!(!md.contains('\u{1b}'));
}
