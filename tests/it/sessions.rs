//! Warm sessions on the oracle fixtures: warm equals cold, exact reuse counts, no bleed between
//! interleaved sessions, rewinds, stops and failures that keep `resident.len() == position()`.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use gemma_engine::error::Result;
use gemma_engine::protocol::{Reuse, TurnEnd};
use gemma_engine::session::Session;
use gemma_engine::turn::{Step, Turn, TurnOptions};
use gemma_model::checkpoint::{LoadedModel, load};
use gemma_model::model::{ComputeDtype, Gemma};

use crate::common::{TurnResult, max_abs_diff};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/oracle")
        .join(name)
}

fn model(name: &str) -> LoadedModel {
    load(
        &fixture(name),
        &Device::flex(),
        ComputeDtype::F32,
        &mut |_, _| {},
    )
    .expect("loads")
}

/// Deterministic pseudo-random ids in `3..vocab`.
fn ids(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            3 + ((x >> 33) as usize % (vocab - 3)) as u32
        })
        .collect()
}

/// The options the engine thread gives a turn: `n` greedy tokens with no end ids, prefilled in
/// chunks of 4 with the user-turn boundary snapshot.
fn opts(lm: &LoadedModel, n: usize) -> TurnOptions {
    TurnOptions {
        chunk: 4,
        boundary_snapshot: true,
        ..TurnOptions::greedy(n, lm.model.config().max_position_embeddings)
    }
}

/// Runs one turn of `n` tokens answering `prompt` in `s`, as the engine thread does.
fn turn(lm: &LoadedModel, s: &mut Session, prompt: &[u32], n: usize) -> Result<TurnResult> {
    crate::common::turn(lm, s, prompt, opts(lm, n))
}

/// Logits after prefilling `prompt` into a fresh session.
fn cold(model: &Gemma, prompt: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model);
    s.prefill(model, prompt, 5)
        .expect("prefill")
        .to_vec()
        .expect("read back")
}

const FIXTURES: [&str; 3] = ["gemma4_e2b_style", "gemma4_moe", "gemma3"];

#[test]
fn warm_turns_prefill_only_the_new_tokens_and_equal_a_cold_recompute() {
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let mut s = Session::new(m);
        let mut convo = vec![2];
        for k in 0..3u64 {
            let new = ids(k, 7 + k as usize * 5, vocab);
            convo.extend(&new);
            let before = s.position();
            let (_, stats, got) = turn(&lm, &mut s, &convo, 4).expect("turn");
            let expected = if k == 0 {
                Reuse::New
            } else {
                Reuse::ExactPrefix
            };
            assert_eq!(stats.reuse, expected, "{name} turn {k}");
            assert_eq!(stats.reused_tokens, before);
            assert_eq!(stats.prefilled_tokens, convo.len() - before);
            convo.extend(&got);
            assert_eq!(s.resident(), convo.as_slice());
            assert_eq!(s.position(), convo.len());
        }
        // The fourth turn, warm, against the whole history cold.
        let new = ids(99, 6, vocab);
        convo.extend(&new);
        assert_eq!(s.prepare(&convo).expect("prepare"), Reuse::ExactPrefix);
        let at = s.position();
        let warm = s
            .prefill(m, &convo[at..], 4)
            .expect("prefill")
            .to_vec()
            .expect("read back");
        let d = max_abs_diff(&warm, &cold(m, &convo));
        assert!(d < 1e-4, "{name}: warm vs cold differ by {d}");
    }
}

#[test]
fn interleaved_sessions_do_not_bleed() {
    let lm = model("gemma4_e2b_style");
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let window = m.config().sliding_window;
    for len in [window - 3, 3 * window + 1] {
        let prompts: Vec<Vec<u32>> = (0..3).map(|k| ids(10 + k, len, vocab)).collect();
        // A alone.
        let mut alone = Session::new(m);
        let first = alone
            .prefill(m, &prompts[0], 4)
            .expect("prefill")
            .to_vec()
            .expect("read back");
        let mut alone_logits = vec![first];
        for step in 0..6u32 {
            let l = alone
                .prefill(m, &[5 + step], 4)
                .expect("decode")
                .to_vec()
                .expect("read back");
            alone_logits.push(l);
        }
        // A, B and C, token by token in turn.
        let mut sessions: Vec<Session> = (0..3).map(|_| Session::new(m)).collect();
        let mut a_logits = Vec::new();
        for (k, s) in sessions.iter_mut().enumerate() {
            let l = s
                .prefill(m, &prompts[k], 4)
                .expect("prefill")
                .to_vec()
                .expect("read back");
            if k == 0 {
                a_logits.push(l);
            }
        }
        for step in 0..6u32 {
            for (k, s) in sessions.iter_mut().enumerate() {
                let id = if k == 0 {
                    5 + step
                } else {
                    40 + step + k as u32
                };
                let l = s
                    .prefill(m, &[id], 4)
                    .expect("decode")
                    .to_vec()
                    .expect("read back");
                if k == 0 {
                    a_logits.push(l);
                }
            }
        }
        for (i, (a, b)) in a_logits.iter().zip(&alone_logits).enumerate() {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "prompt length {len}: step {i} differs from A alone");
        }
    }
}

#[test]
fn equal_and_diverging_prompts_rewind_instead_of_starting_over() {
    let lm = model("gemma3");
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let prompt = ids(3, 20, vocab);
    let mut s = Session::new(m);
    s.prefill(m, &prompt, 6).expect("prefill");

    // The same prompt again: one token is prefilled again, never an empty prefill.
    assert_eq!(s.prepare(&prompt).expect("prepare"), Reuse::Equal);
    assert_eq!(s.position(), prompt.len() - 1);
    let l = s
        .prefill(m, &prompt[s.position()..], 6)
        .expect("prefill")
        .to_vec()
        .expect("read back");
    assert!(max_abs_diff(&l, &cold(m, &prompt)) < 1e-4);

    // Diverging two tokens from the end: the sliding layers (window 8) still hold that far back,
    // so the session rewinds to the common prefix.
    let mut edited = prompt.clone();
    let n = edited.len();
    edited[n - 2] = 7;
    assert_eq!(s.prepare(&edited).expect("prepare"), Reuse::Rewind);
    assert_eq!(s.position(), n - 2);
    assert_eq!(s.resident(), &edited[..s.position()]);
    let at = s.position();
    let l = s
        .prefill(m, &edited[at..], 6)
        .expect("prefill")
        .to_vec()
        .expect("read back");
    assert!(max_abs_diff(&l, &cold(m, &edited)) < 1e-4);

    // Diverging far back, past what the sliding layers keep, with no turn-boundary snapshot:
    // only a full prefill is right, and the session says so.
    let long = ids(4, 60, vocab);
    let mut s = Session::new(m);
    s.prefill(m, &long, 6).expect("prefill");
    let mut edited = long.clone();
    edited[5] = 7;
    assert_eq!(s.prepare(&edited).expect("prepare"), Reuse::Mismatch);
    assert_eq!(s.position(), 0);
}

#[test]
fn stops_and_failures_keep_the_invariant() {
    let lm = model("gemma4_moe");
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let prompt = ids(4, 30, vocab);

    // Cancelled before the first chunk: nothing is prefilled, the turn reports it.
    let mut s = Session::new(m);
    let mut t = Turn::start(&mut s, prompt.clone(), opts(&lm, 5)).expect("start");
    t.cancel();
    assert_eq!(
        t.step(m, &mut s).expect("step"),
        Step::Finished(TurnEnd::Cancelled)
    );
    let stats = t.stats();
    assert_eq!((stats.prefilled_tokens, stats.generated_tokens), (0, 0));
    assert!(!t.prompt_done());
    assert_eq!(s.position(), 0);

    // Cancelled between prefill chunks: the chunks done stay resident and consistent, and the
    // turn's stats count exactly those.
    let mut s = Session::new(m);
    let mut t = Turn::start(&mut s, prompt.clone(), opts(&lm, 5)).expect("start");
    for done in [4, 8] {
        let total = prompt.len();
        assert_eq!(
            t.step(m, &mut s).expect("step"),
            Step::Prefill { done, total }
        );
    }
    t.cancel();
    assert_eq!(
        t.step(m, &mut s).expect("step"),
        Step::Finished(TurnEnd::Cancelled)
    );
    assert_eq!(t.stats().prefilled_tokens, 8);
    assert_eq!(t.stats().reused_tokens, 0);
    assert!(!t.prompt_done());
    assert_eq!(s.resident(), &prompt[..8]);

    // Cancelled mid-answer: the tokens sampled so far are all resident.
    let mut s = Session::new(m);
    let mut t = Turn::start(&mut s, prompt.clone(), opts(&lm, 9)).expect("start");
    while t.answer().len() < 3 {
        t.step(m, &mut s).expect("step");
    }
    t.cancel();
    assert_eq!(
        t.run(m, &mut s, &mut |_| true).expect("end"),
        TurnEnd::Cancelled
    );
    assert_eq!(t.stats().generated_tokens, 3);
    assert_eq!(s.resident(), [&prompt[..], t.answer()].concat().as_slice());

    // A failing prefill (an id outside the vocabulary) empties and marks the session.
    let mut bad = prompt.clone();
    bad.push(vocab as u32 + 5);
    assert!(s.prepare(&bad).is_ok());
    let at = s.position();
    assert!(s.prefill(m, &bad[at..], 64).is_err());
    assert!(s.is_dirty());
    assert_eq!(s.position(), 0);
    assert_eq!(s.prepare(&prompt).expect("prepare"), Reuse::Dirty);
    let (_, stats, _) = turn(&lm, &mut s, &prompt, 3).expect("turn");
    assert_eq!(stats.reuse, Reuse::New);
    assert_eq!(s.position(), prompt.len() + 3);

    // A turn whose prompt leaves no room for an answer is refused and changes nothing.
    let before = s.resident().to_vec();
    let limit = m.config().max_position_embeddings;
    let long = ids(9, limit, vocab);
    let err = turn(&lm, &mut s, &long, 3).expect_err("too long");
    assert!(err.to_string().contains("context length exceeded"), "{err}");
    assert_eq!(s.resident(), before.as_slice());

    // A prompt one token short of the limit runs, and its answer ends at the limit.
    let mut s = Session::new(m);
    let (end, stats, _) = turn(&lm, &mut s, &long[..limit - 2], 5).expect("fits");
    assert_eq!(end, TurnEnd::ContextFull);
    assert_eq!(stats.generated_tokens, 2);
    assert_eq!(s.position(), limit);

    // An end-of-turn id ends the turn and is not resident.
    let (_, _, first) = turn(&lm, &mut Session::new(m), &prompt, 1).expect("turn");
    let end_id = first[0];
    let mut s = Session::new(m);
    let mut o = opts(&lm, 5);
    o.end_ids = vec![end_id];
    let (end, _, answer) = crate::common::turn(&lm, &mut s, &prompt, o).expect("turn");
    assert_eq!(end, TurnEnd::EndOfTurn(end_id));
    assert!(answer.is_empty());
    assert_eq!(s.resident(), prompt.as_slice());
}

#[test]
fn a_session_moved_to_host_memory_comes_back_bit_identical() {
    use gemma_engine::protocol::Tier;
    use gemma_engine::session::serving_capacity;
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let prompt = ids(5, 25, vocab);
        let mut warm = Session::new(m);
        warm.prefill(m, &prompt, 4).expect("prefill");
        let mut moved = warm.clone();
        let bytes = moved.device_bytes();
        assert!(bytes > 0);
        moved.offload();
        assert_eq!(moved.tier(), Tier::Host);
        assert_eq!((moved.device_bytes(), moved.host_bytes()), (0, bytes));
        assert_eq!(moved.position(), prompt.len());
        let step = |s: &mut Session| {
            s.prefill(m, &[9, 10], 4)
                .expect("prefill")
                .to_vec()
                .expect("read back")
        };
        let (a, b) = (step(&mut warm), step(&mut moved));
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name}"
        );
        assert_eq!(moved.tier(), Tier::Device);

        moved.evict();
        assert_eq!(moved.tier(), Tier::Cold);
        assert_eq!(moved.position(), 0);
        assert_eq!(moved.prepare(&prompt).expect("prepare"), Reuse::Evicted);

        // One session's estimate covers what a session at that length holds.
        let (per, n) = serving_capacity(m, m.kv_value_bytes(), prompt.len() + 2, 10 * bytes);
        assert!(
            per >= warm.device_bytes(),
            "{name}: {per} < {}",
            warm.device_bytes()
        );
        assert!(n >= 1);
    }
}

#[test]
fn regenerate_after_a_long_answer_rewinds_to_the_turn_snapshot() {
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let window = m.config().sliding_window;
        let prompt = ids(6, 3 * window, vocab);
        let mut s = Session::new(m);
        // An answer far longer than the window: the sliding buffers have moved on.
        let long = 3 * window;
        let (_, stats, _) = turn(&lm, &mut s, &prompt, long).expect("turn");
        assert_eq!(stats.generated_tokens, long);
        assert_eq!(s.position(), prompt.len() + long);
        // Regenerate: the same prompt again. The snapshot taken one token before its end lets the
        // session rewind there instead of prefilling everything.
        assert_eq!(
            s.prepare(&prompt).expect("prepare"),
            Reuse::Rewind,
            "{name}"
        );
        assert_eq!(s.position(), prompt.len() - 1);
        let l = s
            .prefill(m, &prompt[prompt.len() - 1..], 4)
            .expect("prefill")
            .to_vec()
            .expect("read back");
        let d = max_abs_diff(&l, &cold(m, &prompt));
        assert!(d < 1e-4, "{name}: regenerate differs from cold by {d}");
    }
}

#[test]
fn injected_prefill_decode_and_reset_failures_keep_the_invariant() {
    let lm = model("gemma4_e2b_style");
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let first = ids(21, 30, vocab);
    let turn = |s: &mut Session, prompt: &[u32], n: usize| turn(&lm, s, prompt, n);
    let consistent = |s: &Session| assert_eq!(s.position(), s.resident().len());

    // A healthy first turn, to have history at stake.
    let mut s = Session::new(m);
    turn(&mut s, &first, 4).expect("turn");
    let mut second = s.resident().to_vec();
    second.extend(ids(22, 17, vocab));

    // Prefill fails on its third chunk: the session is emptied and marked, never half-updated.
    s.fail_after(2);
    let err = turn(&mut s, &second, 4).expect_err("injected");
    assert!(err.to_string().contains("injected failure"), "{err}");
    consistent(&s);
    assert!(s.is_dirty());
    assert_eq!(s.position(), 0);

    // The reset's full prefill fails too: still consistent, still dirty.
    s.fail_after(1);
    let err = turn(&mut s, &second, 4).expect_err("injected");
    assert!(err.to_string().contains("injected failure"), "{err}");
    consistent(&s);
    assert!(s.is_dirty());

    // Then it recovers with a full prefill, and its logits equal a cold recompute.
    let (_, stats, _) = turn(&mut s, &second, 1).expect("recovers");
    assert_eq!(stats.reuse, Reuse::Dirty);
    assert_eq!(stats.prefilled_tokens, second.len());
    consistent(&s);

    // A decode step fails after two tokens: same contract.
    let mut s = Session::new(m);
    let prefill_steps = first.len().div_ceil(4) + 1;
    s.fail_after(prefill_steps + 2);
    let mut seen = Vec::new();
    let mut t = Turn::start(&mut s, first.clone(), opts(&lm, 8)).expect("start");
    let err = t
        .run(m, &mut s, &mut |id| {
            seen.push(id);
            true
        })
        .expect_err("injected");
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(seen.len() >= 2, "failed in decode, after tokens: {seen:?}");
    consistent(&s);
    assert!(s.is_dirty());
    let (_, stats, _) = turn(&mut s, &first, 2).expect("recovers");
    assert_eq!(stats.reuse, Reuse::Dirty);
    let mut cold_prompt = first.clone();
    cold_prompt.extend(&s.resident()[first.len()..]);
    let warm = s
        .prefill(m, &[7], 4)
        .expect("prefill")
        .to_vec()
        .expect("read back");
    cold_prompt.push(7);
    assert!(max_abs_diff(&warm, &cold(m, &cold_prompt)) < 1e-4);
}

#[test]
fn a_saved_session_comes_back_warm_and_a_bad_snapshot_is_ignored() {
    use gemma_engine::kv_store::KvStore;
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let dir = tempfile::tempdir().expect("tmp");
        let store = KvStore::new(dir.path().to_path_buf(), &fixture(name), m, 1 << 30);
        // A conversation three windows long, its last id not resident (a stop id).
        let mut convo = ids(31, 30, vocab);
        let mut s = Session::new(m);
        s.prefill(m, &convo, 7).expect("prefill");
        convo.push(1);
        assert!(store.save(&convo, &s, 0).expect("save") > 0);

        let mut back = Session::new(m);
        assert!(
            store.load(&convo, m, &mut back),
            "{name}: the snapshot verifies"
        );
        assert_eq!(back.resident(), s.resident());
        // The next turn reuses all of it, and its logits equal a cold recompute.
        let mut next = convo.clone();
        next.extend(ids(32, 5, vocab));
        assert_eq!(back.prepare(&next).expect("prepare"), Reuse::ExactPrefix);
        assert_eq!(back.position(), convo.len() - 1);
        let warm = back
            .prefill(m, &next[convo.len() - 1..], 4)
            .expect("prefill")
            .to_vec()
            .expect("read back");
        assert!(max_abs_diff(&warm, &cold(m, &next)) < 1e-4, "{name}");

        // Another conversation has no snapshot; a damaged file or other weights do not verify.
        let mut other = Session::new(m);
        assert!(!store.load(&next, m, &mut other));
        let file = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "kv"))
            .expect("a snapshot file");
        let mut bytes = std::fs::read(&file).expect("read");
        let n = bytes.len();
        bytes[n - 3] ^= 0x5a; // somewhere in the data: the checksum catches it
        std::fs::write(&file, &bytes).expect("write");
        assert!(
            !store.load(&convo, m, &mut other),
            "{name}: a damaged file is ignored"
        );
        assert_eq!(other.position(), 0);
        let elsewhere = KvStore::new(dir.path().to_path_buf(), &fixture("gemma4_moe"), m, 1 << 30);
        s.prefill(m, &[5], 1).expect("prefill");
        let mut convo2 = s.resident().to_vec();
        convo2.push(1);
        store.save(&convo2, &s, 0).expect("save");
        if name != "gemma4_moe" {
            assert!(
                !elsewhere.load(&convo2, m, &mut other),
                "{name}: other weights"
            );
        }
        // The disk cap is kept.
        let tiny = KvStore::new(dir.path().to_path_buf(), &fixture(name), m, 10);
        assert_eq!(tiny.save(&convo2, &s, 0).expect("save"), 0);
    }
}

/// A stop string found far back in a long answer: the sliding window has moved past the cut, so
/// the turn goes back to its boundary snapshot and feeds the kept tokens again; the session then
/// holds exactly the prompt and the kept answer, warm, and equals a cold recompute.
#[test]
fn a_cut_past_the_sliding_window_comes_back_through_the_turn_snapshot() {
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let window = m.config().sliding_window;
        let prompt = ids(41, 2 * window, m.config().vocab_size);
        let mut s = Session::new(m);
        // Past the window and the positions kept beyond it for rewinds.
        let slack = gemma_model::model::kv_cache::REWIND_SLACK;
        let mut t =
            Turn::start(&mut s, prompt.clone(), opts(&lm, 4 * (window + slack))).expect("start");
        while t.answer().len() < 3 * (window + slack) {
            t.step(m, &mut s).expect("step");
        }
        assert!(
            !s.clone().rewind(prompt.len() + 2),
            "{name}: the window moved on"
        );
        t.cut(2, m, &mut s).expect("cut");
        assert_eq!(t.end(), Some(TurnEnd::StopString));
        let kept = [&prompt[..], t.answer()].concat();
        assert_eq!(t.answer().len(), 2);
        assert_eq!(s.resident(), kept.as_slice(), "{name}");
        assert!(!s.is_dirty());
        let next = [&kept[..], &[5, 6]].concat();
        assert_eq!(s.prepare(&next).expect("prepare"), Reuse::ExactPrefix);
        let warm = s
            .prefill(m, &next[kept.len()..], 4)
            .expect("prefill")
            .to_vec()
            .expect("read back");
        let d = max_abs_diff(&warm, &cold(m, &next));
        assert!(
            d < 1e-4,
            "{name}: warm after the cut differs from cold by {d}"
        );
    }
}

/// An edit of an earlier message: the prompt keeps the first exchange and changes after it.
/// With both answers far past the sliding window, the session goes back to the snapshot taken at
/// the end of the first answer (no full prefill) and the logits equal a cold run of the edited
/// conversation.
#[test]
fn an_edit_rewinds_to_the_answer_end_snapshot_and_equals_a_cold_run() {
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let window = m.config().sliding_window;
        let mut s = Session::new(m);
        let mut first = vec![2];
        first.extend(ids(11, 5, vocab));
        let (_, _, got) = turn(&lm, &mut s, &first, 2 * window).expect("turn 1");
        first.extend(&got);
        let shared = first.len();
        let mut old = first.clone();
        old.extend(ids(12, 6, vocab));
        let (_, _, got) = turn(&lm, &mut s, &old, 2 * window).expect("turn 2");
        old.extend(&got);
        // The second user message edited.
        let mut edited = first.clone();
        edited.extend(ids(13, 7, vocab));
        assert_eq!(
            s.prepare(&edited).expect("prepare"),
            Reuse::Rewind,
            "{name}"
        );
        assert_eq!(
            s.position(),
            shared,
            "{name}: back to the end of the first answer"
        );
        let warm = s
            .prefill(m, &edited[shared..], 4)
            .expect("prefill")
            .to_vec()
            .expect("read back");
        let d = max_abs_diff(&warm, &cold(m, &edited));
        assert!(d < 1e-4, "{name}: the edit differs from a cold run by {d}");
        assert_eq!(s.resident(), edited.as_slice());
    }
}

/// How far back an edit stays warm once the window has moved on: the session keeps the last four
/// answers' end snapshots, so after five long turns an edit of the third user message rewinds to
/// the end of the second answer, and one of the second (whose snapshot went) starts over, saying
/// so (`mismatch`), never continuing on a wrong cache.
#[test]
fn edits_stay_warm_four_turns_back() {
    let lm = model("gemma3");
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let window = m.config().sliding_window;
    let mut s = Session::new(m);
    let mut convo = vec![2];
    let mut ends = Vec::new();
    for k in 0..5u64 {
        convo.extend(ids(20 + k, 4, vocab));
        let (_, _, got) = turn(&lm, &mut s, &convo, 2 * window).expect("turn");
        convo.extend(&got);
        ends.push(convo.len());
    }
    // The snapshots live in host memory and are counted there (the memory budget sees them).
    assert!(s.host_bytes() > 0 && s.device_bytes() > 0);
    let edit = |upto: usize| {
        let mut e = convo[..upto].to_vec();
        e.extend(ids(99, 5, vocab));
        e
    };
    // The third user message edited: back to the end of the second answer.
    let third = edit(ends[1]);
    let mut warm = s.clone();
    assert_eq!(warm.prepare(&third).expect("prepare"), Reuse::Rewind);
    assert_eq!(warm.position(), ends[1]);
    let l = warm
        .prefill(m, &third[ends[1]..], 4)
        .expect("prefill")
        .to_vec()
        .expect("read back");
    let d = max_abs_diff(&l, &cold(m, &third));
    assert!(d < 1e-4, "{d}");
    // The second: its snapshot is gone, so the session starts over and says so.
    assert_eq!(s.prepare(&edit(ends[0])).expect("prepare"), Reuse::Mismatch);
    assert_eq!(s.position(), 0);
    assert_eq!(
        s.host_bytes(),
        0,
        "a session started over holds no snapshot"
    );
}
