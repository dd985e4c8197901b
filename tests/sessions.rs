//! Warm sessions on the oracle fixtures: warm equals cold, exact reuse counts, no bleed between
//! interleaved sessions, rewinds, stops and failures that keep `resident.len() == position()`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use burn::tensor::Device;
use gemma_chat::engine::session::{Reuse, Session, TurnEnd};
use gemma_chat::generate::{LoadedModel, load};
use gemma_chat::model::{ComputeDtype, Gemma};
use gemma_chat::sampling::SamplingParams;

use common::max_abs_diff;

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

fn never() -> AtomicBool {
    AtomicBool::new(false)
}

/// Logits after prefilling `prompt` into a fresh session.
fn cold(model: &Gemma, prompt: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model);
    s.prefill(model, prompt, 5, &never(), &mut |_, _| {})
        .expect("prefill")
        .expect("logits")
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
        for turn in 0..3u64 {
            let new = ids(turn, 7 + turn as usize * 5, vocab);
            convo.extend(&new);
            let before = s.position();
            let mut got = Vec::new();
            let (_, stats) = s
                .run_turn(
                    m,
                    &convo,
                    &SamplingParams::default(),
                    4,
                    &[],
                    3,
                    &never(),
                    &mut |id| got.push(id),
                )
                .expect("turn");
            let expected = if turn == 0 {
                Reuse::New
            } else {
                Reuse::ExactPrefix
            };
            assert_eq!(stats.reuse, expected, "{name} turn {turn}");
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
            .prefill(m, &convo[at..], 4, &never(), &mut |_, _| {})
            .expect("prefill")
            .expect("logits")
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
            .prefill(m, &prompts[0], 4, &never(), &mut |_, _| {})
            .expect("prefill")
            .expect("logits")
            .to_vec()
            .expect("read back");
        let mut alone_logits = vec![first];
        for step in 0..6u32 {
            let l = alone
                .prefill(m, &[5 + step], 4, &never(), &mut |_, _| {})
                .expect("decode")
                .expect("logits")
                .to_vec()
                .expect("read back");
            alone_logits.push(l);
        }
        // A, B and C, token by token in turn.
        let mut sessions: Vec<Session> = (0..3).map(|_| Session::new(m)).collect();
        let mut a_logits = Vec::new();
        for (k, s) in sessions.iter_mut().enumerate() {
            let l = s
                .prefill(m, &prompts[k], 4, &never(), &mut |_, _| {})
                .expect("prefill")
                .expect("logits")
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
                    .prefill(m, &[id], 4, &never(), &mut |_, _| {})
                    .expect("decode")
                    .expect("logits")
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
    s.prefill(m, &prompt, 6, &never(), &mut |_, _| {})
        .expect("prefill");

    // The same prompt again: one token is prefilled again, never an empty prefill.
    assert_eq!(s.prepare(&prompt).expect("prepare"), Reuse::Equal);
    assert_eq!(s.position(), prompt.len() - 1);
    let l = s
        .prefill(m, &prompt[s.position()..], 6, &never(), &mut |_, _| {})
        .expect("prefill")
        .expect("logits")
        .to_vec()
        .expect("read back");
    assert!(max_abs_diff(&l, &cold(m, &prompt)) < 1e-4);

    // Diverging two tokens from the end: rewound to the common prefix when the window allows.
    let mut edited = prompt.clone();
    let n = edited.len();
    edited[n - 2] = 7;
    match s.prepare(&edited).expect("prepare") {
        Reuse::Rewind => assert_eq!(s.position(), n - 2),
        Reuse::Mismatch => assert_eq!(s.position(), 0),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(s.resident(), &edited[..s.position()]);
    let at = s.position();
    let l = s
        .prefill(m, &edited[at..], 6, &never(), &mut |_, _| {})
        .expect("prefill")
        .expect("logits")
        .to_vec()
        .expect("read back");
    assert!(max_abs_diff(&l, &cold(m, &edited)) < 1e-4);
}

#[test]
fn stops_and_failures_keep_the_invariant() {
    let lm = model("gemma4_moe");
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let prompt = ids(4, 30, vocab);

    // Stopped before the first chunk: nothing is prefilled, the turn reports it.
    let mut s = Session::new(m);
    let stopped = AtomicBool::new(true);
    let (end, stats) = s
        .run_turn(
            m,
            &prompt,
            &SamplingParams::default(),
            5,
            &[],
            4,
            &stopped,
            &mut |_| {},
        )
        .expect("turn");
    assert_eq!(end, TurnEnd::Stopped);
    assert_eq!(stats.generated_tokens, 0);
    assert_eq!(s.position(), s.resident().len());

    // Stopped between prefill chunks: the chunks done stay resident and consistent.
    let mut s = Session::new(m);
    let flag = AtomicBool::new(false);
    let out = s
        .prefill(m, &prompt, 4, &flag, &mut |done, _| {
            if done >= 8 {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .expect("prefill");
    assert!(out.is_none());
    assert_eq!(s.resident(), &prompt[..8]);

    // A failing prefill (an id outside the vocabulary) empties and marks the session.
    let mut bad = prompt.clone();
    bad.push(vocab as u32 + 5);
    assert!(s.prepare(&bad).is_ok());
    let at = s.position();
    assert!(
        s.prefill(m, &bad[at..], 64, &never(), &mut |_, _| {})
            .is_err()
    );
    assert!(s.is_dirty());
    assert_eq!(s.position(), 0);
    assert_eq!(s.prepare(&prompt).expect("prepare"), Reuse::Dirty);
    let (_, stats) = s
        .run_turn(
            m,
            &prompt,
            &SamplingParams::default(),
            3,
            &[],
            4,
            &never(),
            &mut |_| {},
        )
        .expect("turn");
    assert_eq!(stats.reuse, Reuse::New);
    assert_eq!(s.position(), prompt.len() + 3);

    // A turn that cannot fit the context is refused and changes nothing.
    let before = s.resident().to_vec();
    let long = ids(9, 600, vocab);
    let err = s
        .run_turn(
            m,
            &long,
            &SamplingParams::default(),
            3,
            &[],
            4,
            &never(),
            &mut |_| {},
        )
        .expect_err("too long");
    assert!(err.to_string().contains("context length exceeded"), "{err}");
    assert_eq!(s.resident(), before.as_slice());

    // A stop id ends the turn and is not resident.
    let mut s = Session::new(m);
    let mut first = None;
    s.run_turn(
        m,
        &prompt,
        &SamplingParams::default(),
        1,
        &[],
        4,
        &never(),
        &mut |id| first = Some(id),
    )
    .expect("turn");
    let stop = first.expect("one token");
    let mut s = Session::new(m);
    let (end, _) = s
        .run_turn(
            m,
            &prompt,
            &SamplingParams::default(),
            5,
            &[stop],
            4,
            &never(),
            &mut |_| {},
        )
        .expect("turn");
    assert_eq!(end, TurnEnd::Stop(stop));
    assert_eq!(s.resident(), prompt.as_slice());
}

#[test]
fn a_session_moved_to_host_memory_comes_back_bit_identical() {
    use gemma_chat::engine::session::{Tier, serving_capacity};
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let prompt = ids(5, 25, vocab);
        let mut warm = Session::new(m);
        warm.prefill(m, &prompt, 4, &never(), &mut |_, _| {})
            .expect("prefill");
        let mut moved = warm.clone();
        let bytes = moved.device_bytes();
        assert!(bytes > 0);
        moved.offload();
        assert_eq!(moved.tier(), Tier::Host);
        assert_eq!((moved.device_bytes(), moved.host_bytes()), (0, bytes));
        assert_eq!(moved.position(), prompt.len());
        let step = |s: &mut Session| {
            s.prefill(m, &[9, 10], 4, &never(), &mut |_, _| {})
                .expect("prefill")
                .expect("logits")
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
        let (per, n) = serving_capacity(m, 4, prompt.len() + 2, 10 * bytes);
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
        let (_, stats) = s
            .run_turn(
                m,
                &prompt,
                &SamplingParams::default(),
                long,
                &[],
                4,
                &never(),
                &mut |_| {},
            )
            .expect("turn");
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
            .prefill(m, &prompt[prompt.len() - 1..], 4, &never(), &mut |_, _| {})
            .expect("prefill")
            .expect("logits")
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
    let turn = |s: &mut Session, prompt: &[u32], n: usize| {
        s.run_turn(
            m,
            prompt,
            &SamplingParams::default(),
            n,
            &[],
            4,
            &never(),
            &mut |_| {},
        )
    };
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
    let (_, stats) = turn(&mut s, &second, 1).expect("recovers");
    assert_eq!(stats.reuse, Reuse::Dirty);
    assert_eq!(stats.prefilled_tokens, second.len());
    consistent(&s);

    // A decode step fails after two tokens: same contract.
    let mut s = Session::new(m);
    let prefill_steps = first.len().div_ceil(4) + 1;
    s.fail_after(prefill_steps + 2);
    let mut seen = Vec::new();
    let err = s
        .run_turn(
            m,
            &first,
            &SamplingParams::default(),
            8,
            &[],
            4,
            &never(),
            &mut |id| seen.push(id),
        )
        .expect_err("injected");
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(seen.len() >= 2, "failed in decode, after tokens: {seen:?}");
    consistent(&s);
    assert!(s.is_dirty());
    let (_, stats) = turn(&mut s, &first, 2).expect("recovers");
    assert_eq!(stats.reuse, Reuse::Dirty);
    let mut cold_prompt = first.clone();
    cold_prompt.extend(&s.resident()[first.len()..]);
    let warm = s
        .prefill(m, &[7], 4, &never(), &mut |_, _| {})
        .expect("prefill")
        .expect("logits")
        .to_vec()
        .expect("read back");
    cold_prompt.push(7);
    assert!(max_abs_diff(&warm, &cold(m, &cold_prompt)) < 1e-4);
}

#[test]
fn a_saved_session_comes_back_warm_and_a_bad_snapshot_is_ignored() {
    use gemma_chat::engine::kv_store::KvStore;
    for name in FIXTURES {
        let lm = model(name);
        let m = &lm.model;
        let vocab = m.config().vocab_size;
        let dir = tempfile::tempdir().expect("tmp");
        let store = KvStore::new(dir.path().to_path_buf(), &fixture(name), m, 1 << 30);
        // A conversation three windows long, its last id not resident (a stop id).
        let mut convo = ids(31, 30, vocab);
        let mut s = Session::new(m);
        s.prefill(m, &convo, 7, &never(), &mut |_, _| {})
            .expect("prefill");
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
            .prefill(m, &next[convo.len() - 1..], 4, &never(), &mut |_, _| {})
            .expect("prefill")
            .expect("logits")
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
        s.prefill(m, &[5], 1, &never(), &mut |_, _| {})
            .expect("prefill");
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
