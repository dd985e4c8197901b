//! A conversation rebuilt from its transcript (an imported chat, a branch to an edit not run in
//! this process, a restart without the engine's own copy) places each exchange's pictures and
//! recordings where they were sent, encoded when the prefill reaches them (issue 58): the model sees what the user
//! sees, in the same ids as the live conversation (all but the sampled answer, which only the live
//! one holds as sampled: the transcript has its text).

use gemma_engine::convo_store::SavedConvo;
use gemma_engine::protocol::{Attachment, Command, Exchange, Reuse};

use crate::audio_chat::{audio_fixture, clip};
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
    both_ways(vision_fixture, live_dir, sent, media)
}

/// The live chat with `sent` in its first message on the fixture copy `live_dir`, and the same
/// chat rebuilt on a fresh copy (`fixture`) from its transcript, with `sent` when `media`.
fn both_ways(
    fixture: fn() -> tempfile::TempDir,
    live_dir: tempfile::TempDir,
    sent: Vec<Attachment>,
    media: bool,
) -> (Side, Side) {
    let h = engine(live_dir.path());
    open(&h, 1);
    let first = submit(&h, 1, "What is it?", sent.clone());
    let follow_up = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    drop(h);
    let saved = store(live_dir.path()).load(&chat(1)).expect("saved");
    let live = Side { saved, follow_up };
    // Another engine, with nothing saved for the chat: the transcript is all it has.
    let other = fixture();
    let h = engine(other.path());
    h.send(Command::Attach {
        tab: 1,
        chat: chat(1),
        history: vec![Exchange {
            calls: Vec::new(),
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

/// Two recordings, one resampled from a 44.1 kHz MP3: their pieces' places, keys and token
/// counts are the live ones, which the audio tower confirms when the prefill encodes them.
#[test]
fn a_transcript_with_recordings_rebuilds_the_live_conversation() {
    let live_dir = audio_fixture();
    let tmp = tempfile::tempdir().expect("tmp");
    let (memo, chirp) = (tmp.path().join("memo.wav"), tmp.path().join("chirp.mp3"));
    std::fs::copy(clip("a.wav"), &memo).expect("copy");
    let mp3 = crate::common::chat::root().join("tests/fixtures/audio/features/chirp_44k.mp3");
    std::fs::copy(mp3, &chirp).expect("copy");
    let sent = vec![Attachment::audio(memo), Attachment::audio(chirp)];
    let (live, again) = both_ways(audio_fixture, live_dir, sent, true);
    assert_eq!(again.follow_up.stats.reuse, Reuse::Restored);
    assert_eq!(first_turn(&again.saved), first_turn(&live.saved));
    assert_eq!(again.saved.pictures, live.saved.pictures);
    assert!(live.saved.pictures.len() >= 2 && live.saved.pictures.iter().all(|p| p.audio));
    let runs = (again.follow_up.notices.iter())
        .filter(|n| n.contains("encoding a recording of the conversation again"))
        .count();
    assert_eq!(
        runs,
        live.saved.pictures.len(),
        "{:?}",
        again.follow_up.notices
    );
}

/// A branch to an edit of a message with a picture (another text, the same picture), taken in
/// the same process: the edit is rendered again with its picture in its place, where the encoded
/// one already is, so the picture keeps its rows and no tower runs for the follow-up.
#[test]
fn a_branch_to_an_edit_keeps_the_pictures_rows() {
    let dir = vision_fixture();
    let picture = dir.path().join("photo.png");
    std::fs::copy(dir.path().join("a.png"), &picture).expect("copy");
    let sent = vec![Attachment::image(picture, BUDGET)];
    let h = engine(dir.path());
    open(&h, 1);
    let first = submit(&h, 1, "What is it?", sent.clone());
    h.send(Command::SetPath {
        tab: 1,
        history: vec![Exchange {
            calls: Vec::new(),
            user: "What is this picture?".into(),
            media: sent,
            answer: first.answer.clone(),
        }],
    });
    let follow_up = submit(&h, 1, "And?", Vec::new());
    h.send(Command::Shutdown);
    drop(h);
    // A rewind, or a full prefill where the fixture's sliding window cannot rewind so far: the
    // picture's rows are the encoded ones either way.
    let reuse = follow_up.stats.reuse;
    assert!(
        matches!(reuse, Reuse::Rewind | Reuse::Mismatch),
        "{reuse:?}"
    );
    assert!(
        follow_up.notices.iter().all(|n| !n.starts_with("encoding")),
        "{:?}",
        follow_up.notices
    );
    let saved = store(dir.path()).load(&chat(1)).expect("saved");
    assert_eq!(saved.pictures.len(), 1, "{:?}", saved.pictures);
}
