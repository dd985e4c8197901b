//! Speculative decoding by prompt lookup (issue 60): a draft and the answer's last token fed in
//! one forward give, row by row, the logits one-token steps give (bit for bit); each drafted
//! position is picked as a plain step picks it, so an answer is the same ids greedy or seeded,
//! on every fixture (sliding windows rewound past rejected drafts included), with
//! `resident == position` after every check.

use std::path::Path;

use burn::tensor::Device;
use gemma_engine::protocol::{SamplingParams, Speculate, Speculation, TurnEnd, TurnStats};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::checkpoint::{LoadedModel, load};
use gemma_model::model::{ComputeDtype, KvCache, Logits};

const FIXTURES: [&str; 3] = ["gemma4_e2b_style", "gemma4_moe", "gemma3"];

fn model(name: &str) -> LoadedModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oracle");
    load(
        &dir.join(name),
        &Device::flex(),
        ComputeDtype::F32,
        &mut |_, _| {},
    )
    .expect("loads")
}

/// A prompt that repeats itself: lookup has something to draft from.
fn prompt(vocab: usize) -> Vec<u32> {
    let part: Vec<u32> = (0..24)
        .map(|i| 3 + (i * 7919 % (vocab - 3)) as u32)
        .collect();
    let mut p = vec![2];
    p.extend(&part);
    p.extend(&part);
    p.extend(&part[..6]);
    p
}

/// One turn of `n` tokens from a fresh session: how it ended, its stats and answer, and the
/// session's resident ids.
fn answer(
    lm: &LoadedModel,
    prompt: &[u32],
    n: usize,
    sampling: SamplingParams,
    kind: Speculate,
) -> (TurnEnd, TurnStats, Vec<u32>, Vec<u32>) {
    let mut s = Session::new(&lm.model);
    let opts = TurnOptions {
        sampling,
        chunk: 16,
        boundary_snapshot: true,
        speculation: Speculation { kind, draft_max: 6 },
        ..TurnOptions::greedy(n, lm.model.config().max_position_embeddings)
    };
    let mut t = Turn::start(&mut s, prompt.to_vec(), opts).expect("starts");
    let end = t.run(&lm.model, &mut s, &mut |_| true).expect("runs");
    assert_eq!(s.resident().len(), s.position());
    (end, t.stats(), t.answer().to_vec(), s.resident().to_vec())
}

#[test]
fn a_forward_of_several_rows_gives_each_row_as_a_one_row_step_does() {
    for name in FIXTURES {
        let lm = model(name);
        assert!(lm.model.checks_exact());
        let p = prompt(lm.model.config().vocab_size);
        let (head, tail) = p.split_at(p.len() - 9);
        let mut one: KvCache = lm.model.new_cache();
        lm.model
            .forward(head, &mut one, 0, Logits::None)
            .expect("prefill");
        let mut many = one.clone();
        let mut rows = Vec::new();
        for (i, &id) in tail.iter().enumerate() {
            let pos = head.len() + i;
            let l = lm
                .model
                .forward(&[id], &mut one, pos, Logits::Last)
                .expect("step");
            rows.extend(
                l.expect("logits")
                    .into_data()
                    .try_to_vec::<f32>()
                    .expect("f32"),
            );
        }
        let all = lm
            .model
            .forward(tail, &mut many, head.len(), Logits::All)
            .expect("check");
        let all = all
            .expect("logits")
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let same = rows
            .iter()
            .zip(&all)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same && rows.len() == all.len(), "{name}: rows differ");
    }
}

#[test]
fn where_rows_are_not_exact_it_does_not_speculate() {
    // burn's graph (the GPU backends' path, and the CPU's in f16/bf16) computes a forward of
    // several rows otherwise than a step of one: no check runs there.
    let mut lm = model("gemma4_e2b_style");
    lm.model.set_fused(false);
    assert!(!lm.model.checks_exact());
    let p = prompt(lm.model.config().vocab_size);
    let plain = answer(&lm, &p, 60, SamplingParams::greedy(), Speculate::Off);
    let spec = answer(&lm, &p, 60, SamplingParams::greedy(), Speculate::Lookup);
    assert_eq!(spec.2, plain.2);
    assert!(spec.1.speculation.is_none(), "{:?}", spec.1.speculation);
}

#[test]
fn lookup_gives_the_answer_plain_decoding_gives_greedy_and_seeded() {
    let seeded = SamplingParams {
        temperature: 1.0,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.0,
        seed: 7,
    };
    for name in FIXTURES {
        let lm = model(name);
        let p = prompt(lm.model.config().vocab_size);
        let mut checks = 0;
        for sampling in [SamplingParams::greedy(), seeded.clone()] {
            let plain = answer(&lm, &p, 120, sampling.clone(), Speculate::Off);
            let spec = answer(&lm, &p, 120, sampling.clone(), Speculate::Lookup);
            assert_eq!(spec.2, plain.2, "{name} {sampling:?}: the same ids");
            assert_eq!(spec.0, plain.0, "{name}: the same end");
            assert_eq!(spec.3, plain.3, "{name}: the same resident ids");
            assert!(plain.1.speculation.is_none());
            assert_eq!(spec.1.generated_tokens, plain.1.generated_tokens);
            checks += spec.1.speculation.map_or(0, |s| s.steps);
        }
        // Greedy, the random models loop: the loops are drafted.
        assert!(checks > 0, "{name}: no draft was checked");
    }
}

#[test]
fn a_greedy_loop_is_drafted_and_accepted() {
    // The tiny random models fall into loops greedily: lookup drafts them and they are kept.
    let lm = model("gemma4_e2b_style");
    let p = prompt(lm.model.config().vocab_size);
    let (_, stats, ids, _) = answer(&lm, &p, 200, SamplingParams::greedy(), Speculate::Lookup);
    let s = stats.speculation.expect("ran");
    assert!(s.accepted > 0, "{s:?}");
    assert!(s.tokens_per_step() > 1.0, "{s:?}");
    // Each check gives its kept drafts and a token of its own (the last maybe none: the end).
    assert!(
        s.tokens <= s.accepted + s.steps && s.tokens + 1 >= s.accepted + s.steps,
        "{s:?}"
    );
    assert_eq!(ids.len(), 200);
}

#[test]
fn a_cancel_keeps_only_what_was_shown() {
    for name in FIXTURES {
        let lm = model(name);
        let p = prompt(lm.model.config().vocab_size);
        let cut = |kind: Speculate| {
            let mut s = Session::new(&lm.model);
            let opts = TurnOptions {
                speculation: Speculation { kind, draft_max: 6 },
                ..TurnOptions::greedy(120, lm.model.config().max_position_embeddings)
            };
            let mut t = Turn::start(&mut s, p.clone(), opts).expect("starts");
            let mut shown = 0;
            let end = t
                .run(&lm.model, &mut s, &mut |_| {
                    shown += 1;
                    shown < 37
                })
                .expect("runs");
            assert_eq!(s.resident().len(), s.position());
            (end, t.answer().to_vec(), s.resident().to_vec())
        };
        let (plain, spec) = (cut(Speculate::Off), cut(Speculate::Lookup));
        assert_eq!(spec, plain, "{name}");
        assert_eq!((plain.0, plain.1.len()), (TurnEnd::Cancelled, 37), "{name}");
    }
}

#[test]
fn the_engine_speculates_with_stop_strings_and_gives_the_same_answers() {
    use crate::common::chat::{configure, engine, fixture, open, submit};
    use gemma_engine::protocol::TabSettings;
    let settings = |kind: Speculate, stop: Vec<String>| TabSettings {
        max_new_tokens: 80,
        stop,
        speculation: Speculation { kind, draft_max: 8 },
        ..TabSettings::default()
    };
    let dir = fixture("gemma4_e2b_style", None);
    let h = engine(dir.path());
    for tab in 1..=3 {
        open(&h, tab);
    }
    // A stop string from the middle of a plain answer.
    configure(&h, 3, settings(Speculate::Off, Vec::new()));
    let first = "Say it again and again.";
    let free = submit(&h, 3, first, Vec::new()).answer;
    let at = free
        .char_indices()
        .nth(free.chars().count() / 2)
        .map_or(0, |(i, _)| i);
    let stop: String = free[at..].chars().take(3).collect();
    configure(&h, 1, settings(Speculate::Off, vec![stop.clone()]));
    configure(&h, 2, settings(Speculate::Lookup, vec![stop.clone()]));
    for text in [first, "And once more."] {
        let a = submit(&h, 1, text, Vec::new());
        let b = submit(&h, 2, text, Vec::new());
        assert_eq!(
            b.answer, a.answer,
            "{text}: the same answer, cut at the same stop"
        );
        assert_eq!(b.stats.generated_tokens, a.stats.generated_tokens);
        assert_eq!(b.stats.reuse, a.stats.reuse);
        assert!(a.stats.speculation.is_none());
    }
}
