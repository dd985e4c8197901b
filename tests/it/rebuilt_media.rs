//! A conversation rebuilt from its transcript (an imported chat, a branch to an edit not run in
//! this process, a restart without the engine's own copy) places each exchange's pictures where
//! they were sent, encoded when the prefill reaches them (issue 58): the model sees what the user
//! sees, in the same ids as the live conversation (all but the sampled answer, which only the live
//! one holds as sampled: the transcript has its text).

use gemma_engine::convo_store::SavedConvo;
use gemma_engine::protocol::{Attachment, Command, Exchange, Reuse};

use crate::common::chat::{Done, chat, configure, engine, open, short_answers, store, submit};
use crate::vision_chat::{BUDGET, vision_fixture};

/// A chat's conversation as its engine saved it after the follow-up, and the follow-up.
struct Side {
    saved: SavedConvo,
    follow_up: Done,
}

/// The live chat (a picture, then a follow-up), and the same chat rebuilt on a fresh engine from
/// its transcript, with the first message's picture when `media`.
fn live_and_rebuilt(media: bool) -> (Side, Side) {
    let live_dir = vision_fixture();
    let picture = live_dir.path().join("photo.png");
    std::fs::copy(live_dir.path().join("a.png"), &picture).expect("copy");
    let sent = vec![Attachment::image(picture.clone(), BUDGET)];
    let h = engine(live_dir.path());
    open(&h, 1);
    let first = submit(&h, 1, "What is it?", sent.clone());
    let follow_up = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    drop(h);
    let saved = store(live_dir.path()).load(&chat(1)).expect("saved");
    let live = Side { saved, follow_up };
    // Another engine, with nothing saved for the chat: the transcript is all it has.
    let other = vision_fixture();
    let h = engine(other.path());
    h.send(Command::Attach {
        tab: 1,
        chat: chat(1),
        history: vec![Exchange {
            user: "What is it?".into(),
            media: if media { sent } else { Vec::new() },
            answer: first.answer.clone(),
        }],
        legacy: None,
    });
    configure(&h, 1, short_answers());
    let follow_up = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    drop(h);
    let saved = store(other.path()).load(&chat(1)).expect("saved");
    (live, Side { saved, follow_up })
}

/// The ids up to the first answer: BOS, the header and the first user turn with its picture.
fn first_turn(c: &SavedConvo) -> &[u32] {
    &c.ids[..1 + c.header + c.exchanges[0][0]]
}

#[test]
fn a_transcript_with_a_picture_rebuilds_the_live_conversation() {
    let (live, again) = live_and_rebuilt(true);
    assert_eq!(again.follow_up.stats.reuse, Reuse::Restored);
    assert_eq!(first_turn(&again.saved), first_turn(&live.saved));
    assert_eq!(
        again.saved.pictures, live.saved.pictures,
        "same places and keys"
    );
    assert_eq!(live.saved.pictures.len(), 1);
    let runs = (again.follow_up.notices.iter())
        .filter(|n| n.contains("encoding a picture of the conversation again"))
        .count();
    assert_eq!(
        runs, 1,
        "encoded by the prefill: {:?}",
        again.follow_up.notices
    );
    // What the transcript gave before: the text alone, a shorter first turn, no picture.
    let (_, text_only) = live_and_rebuilt(false);
    assert!(text_only.saved.pictures.is_empty());
    let (short, long) = (first_turn(&text_only.saved), first_turn(&live.saved));
    assert!(
        short.len() + BUDGET / 2 < long.len(),
        "{short:?} vs {long:?}"
    );
    assert!(
        text_only
            .follow_up
            .notices
            .iter()
            .all(|n| !n.starts_with("encoding"))
    );
}
