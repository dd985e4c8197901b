//! The chat tree saved and read back: format 2 transcripts, round trips, broken trees.
use super::*;

fn msg(id: u64, parent: Option<u64>, role: &str, text: &str) -> SavedMessage {
    SavedMessage {
        id,
        parent,
        ..SavedMessage::new(role, text)
    }
}

#[test]
fn a_format_2_transcript_loads_as_one_path() {
    let v2 = r#"{"version":2,"order":0,"title":"t","model":"m","thinking":false,
        "messages":[{"role":"system","text":"be brief"},{"role":"user","text":"hi"},
        {"role":"model","text":"hello","footer":"done"}]}"#;
    let chat: SavedChat = serde_json::from_str(v2).expect("a format 2 file reads");
    let (path, branches) = tree(chat.messages, chat.branches);
    let ids: Vec<u64> = path.iter().map(|m| m.id).collect();
    assert_eq!(ids, [1, 2, 3], "numbered in order");
    assert!(branches.is_empty());
    assert_eq!(path[2].footer.as_deref(), Some("done"));
}

#[test]
fn a_tree_round_trips_and_a_broken_one_keeps_its_path() {
    let mut t = Tab::new(1, "t".into(), Default::default());
    t.push(Message::new(Role::User, "a"));
    t.push(Message::new(Role::Model, "A"));
    t.fork_at(1);
    t.push(Message::new(Role::Model, "A2"));
    let saved = saved_tree(&t);
    assert_eq!(saved.version, VERSION);
    assert_eq!(saved.messages[1].parent, Some(saved.messages[0].id));
    assert_eq!(saved.branches.len(), 1);
    assert_eq!(saved.branches[0].messages[0].parent, Some(1));
    let json = serde_json::to_string(&saved).expect("json");
    let back: SavedChat = serde_json::from_str(&json).expect("reads");
    let (path, branches) = tree(back.messages, back.branches);
    let key = |ms: &[Message]| -> Vec<(u64, String)> {
        ms.iter().map(|m| (m.id, m.text.clone())).collect()
    };
    assert_eq!(key(&path), key(&t.messages));
    assert_eq!(branches.len(), 1);
    assert_eq!(branches[0].parent, t.branches[0].parent);
    assert_eq!(key(&branches[0].messages), key(&t.branches[0].messages));
    // Repeated ids: numbered afresh, the branch kept where it hung; a branch from nowhere
    // (or from itself) hangs from the start.
    let (path, branches) = tree(
        vec![msg(5, None, "user", "a"), msg(5, Some(5), "model", "A")],
        vec![SavedBranch {
            parent: 5,
            messages: vec![msg(6, Some(5), "model", "B")],
        }],
    );
    assert_eq!(path.iter().map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(branches.len(), 1);
    assert_eq!((branches[0].parent, branches[0].messages[0].id), (1, 3));
    let (_, branches) = tree(
        vec![msg(1, None, "user", "a")],
        vec![
            SavedBranch {
                parent: 9,
                messages: vec![msg(2, Some(9), "model", "B")],
            },
            SavedBranch {
                parent: 3,
                messages: vec![msg(3, Some(3), "model", "C")],
            },
        ],
    );
    assert_eq!(
        branches.iter().map(|b| b.parent).collect::<Vec<_>>(),
        [0, 0]
    );
}

#[test]
fn ids_near_the_top_are_numbered_afresh() {
    let (path, branches) = tree(
        vec![
            msg(u64::MAX - 1, None, "user", "a"),
            msg(u64::MAX, Some(u64::MAX - 1), "model", "A"),
        ],
        vec![SavedBranch {
            parent: u64::MAX - 1,
            messages: vec![msg(7, Some(u64::MAX - 1), "model", "B")],
        }],
    );
    assert_eq!(path.iter().map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!((branches[0].parent, branches[0].messages[0].id), (1, 3));
}

/// Two answers with one id, both children of the question (probe 2026-12-06, E6): the second
/// becomes another version of the answer, not an answer to the first.
#[test]
fn a_path_that_does_not_follow_its_parents_is_split_into_versions() {
    let (path, branches) = tree(
        vec![
            msg(1, None, "user", "hello"),
            msg(2, Some(1), "model", "hi"),
            msg(2, Some(1), "model", "alt answer"),
            msg(4, Some(2), "user", "and then?"),
        ],
        Vec::new(),
    );
    let texts = |ms: &[Message]| ms.iter().map(|m| m.text.clone()).collect::<Vec<_>>();
    assert_eq!(texts(&path), ["hello", "hi"]);
    assert_eq!(branches.len(), 1);
    assert_eq!(branches[0].parent, path[0].id);
    assert_eq!(texts(&branches[0].messages), ["alt answer", "and then?"]);
    let mut ids: Vec<u64> = path
        .iter()
        .chain(branches.iter().flat_map(|b| &b.messages))
        .map(|m| m.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "every id once");
    // The file says what was wrong with it.
    let chat = SavedChat {
        version: VERSION,
        messages: vec![
            msg(1, None, "user", "hello"),
            msg(2, Some(1), "model", "hi"),
            msg(2, Some(1), "model", "alt answer"),
        ],
        ..SavedChat::default()
    };
    let fault = crate::chats::format::tree_fault(&chat).expect("a fault");
    assert!(fault.contains("used twice"), "{fault}");
    let chat = SavedChat {
        messages: vec![
            msg(1, None, "user", "hello"),
            msg(3, Some(1), "model", "hi"),
            msg(2, Some(1), "model", "alt answer"),
        ],
        ..chat
    };
    let fault = crate::chats::format::tree_fault(&chat).expect("a fault");
    assert!(fault.contains("does not follow"), "{fault}");
    // A tree this app writes has none.
    let mut t = Tab::new(1, "t".into(), Default::default());
    t.push(Message::new(Role::System, "be brief"));
    t.push(Message::new(Role::User, "a"));
    t.push(Message::new(Role::Model, "A"));
    t.fork_at(2);
    t.push(Message::new(Role::Model, "A2"));
    assert_eq!(crate::chats::format::tree_fault(&saved_tree(&t)), None);
}
