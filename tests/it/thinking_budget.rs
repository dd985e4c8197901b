//! The per-turn thought budget on the tiny Gemma 4 checkpoint, whose thought channel a test hook
//! opens (`TurnOptions::forced`: the random model never opens it by itself): the thought stops
//! within the budget and one line (or the grace), the close is one `<channel|>`, and the answer
//! follows through the same reply path as any token; the budget spans blocks; budget 0 closes at
//! once without eating a token; a tool call is never cut; and through the engine the count
//! streams with the thought and lands in the turn's stats.

use std::sync::Arc;
use std::time::Duration;

use burn::tensor::Device;
use gemma_engine::budget::{LINE_GRACE, SOFT_SHARE, ThoughtLimit, ThoughtVocab};
use gemma_engine::protocol::TabSettings;
use gemma_engine::protocol::{Command, Event, ToolChoice, TurnEnd, TurnStats};
use gemma_engine::reply::{Piece, Reply};
use gemma_engine::session::Session;
use gemma_engine::thinking::Channels;
use gemma_engine::tools::ToolIds;
use gemma_engine::tools::guide::CallGuide;
use gemma_engine::turn::{Guide, Step, Turn, TurnOptions};
use gemma_engine::{EngineOptions, spawn};
use gemma_model::checkpoint::{LoadedModel, load};
use gemma_model::model::ComputeDtype;
use gemma_model::sampling::SamplingParams;
use gemma_model::tokenizer::Tokenizer;
use gemma_tools::syntax::{CallGrammar, Vocab};

use super::common::chat::{first_after_loading, fixture, open};

/// `<|channel>` and `<channel|>` in the tiny vocabulary.
const OPEN: u32 = 100;
const CLOSE: u32 = 101;
/// `\n`.
const NL: u32 = 107;

fn model() -> (tempfile::TempDir, LoadedModel) {
    let dir = fixture("gemma4_e2b_style", None);
    let lm = load(
        dir.path(),
        &Device::flex(),
        ComputeDtype::F32,
        &mut |_, _| {},
    )
    .expect("loads");
    (dir, lm)
}

fn tok(lm: &LoadedModel) -> &Tokenizer {
    lm.tokenizer.as_ref().expect("tokenizer")
}

fn channels(lm: &LoadedModel) -> Channels {
    let ch = Channels::of(tok(lm)).expect("channels");
    assert_eq!((ch.open, ch.close), (OPEN, CLOSE));
    ch
}

fn vocab(lm: &LoadedModel, message: Option<&str>) -> Arc<ThoughtVocab> {
    Arc::new(ThoughtVocab::new(tok(lm), channels(lm), message))
}

/// The ids that open a thought as Gemma 4 writes it (`<|channel>thought\n`), forced from the
/// start of the answer.
fn opened(tok: &Tokenizer) -> Vec<(usize, u32)> {
    let mut ids = vec![OPEN];
    ids.extend(tok.encode("thought\n").expect("encodes"));
    ids.into_iter().enumerate().collect()
}

/// `id` forced at each of `at`.
fn at(positions: impl IntoIterator<Item = usize>, id: u32) -> Vec<(usize, u32)> {
    positions.into_iter().map(|p| (p, id)).collect()
}

/// The thought tokens of each block of `answer` (the markers left out).
fn blocks(answer: &[u32]) -> Vec<usize> {
    let (mut out, mut inside) = (Vec::new(), false);
    for &id in answer {
        match id {
            OPEN if !inside => {
                inside = true;
                out.push(0);
            }
            OPEN => {}
            CLOSE => inside = false,
            _ if inside => *out.last_mut().expect("a block") += 1,
            _ => {}
        }
    }
    out
}

/// A turn's options: sampled (seeded), `n` tokens at most, the budget, the forced ids.
fn options(
    vocab: &Arc<ThoughtVocab>,
    budget: Option<usize>,
    forced: Vec<(usize, u32)>,
    n: usize,
    seed: u64,
) -> TurnOptions {
    TurnOptions {
        sampling: SamplingParams {
            temperature: 1.0,
            top_k: 64,
            top_p: 0.95,
            min_p: 0.0,
            seed,
        },
        thinking: Some(ThoughtLimit {
            budget,
            vocab: vocab.clone(),
        }),
        forced,
        ..TurnOptions::greedy(n, 512)
    }
}

/// What a turn gave: its ids, what its reply showed (thought and answer apart), its stats.
struct Ran {
    prompt: usize,
    answer: Vec<u32>,
    thought: String,
    text: String,
    stats: TurnStats,
    resident: usize,
}

/// Runs a turn as the engine thread does (each token through a [`Reply`]); a hand-over to tools
/// is answered with `response`.
fn run(
    lm: &LoadedModel,
    opts: TurnOptions,
    guide: Option<Box<dyn Guide>>,
    response: &[u32],
) -> Ran {
    let tok = tok(lm);
    let prompt = tok
        .encode("<bos><|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n")
        .expect("encodes");
    let mut s = Session::new(&lm.model);
    let mut t = Turn::start(&mut s, prompt.clone(), opts).expect("starts");
    if let Some(g) = guide {
        t = t.with_guide(g);
    }
    let mut reply = Reply::new(Some(channels(lm)), Vec::new());
    let (mut thought, mut text) = (String::new(), String::new());
    let mut show = |p: Option<Piece>| match p {
        Some(Piece::Thought(s)) => thought.push_str(&s),
        Some(Piece::Answer(s)) => text.push_str(&s),
        None => {}
    };
    loop {
        match t.step(&lm.model, &mut s).expect("steps") {
            Step::Token(id) => show(reply.push(tok, id).expect("text").0),
            Step::ToolCalls => {
                show(reply.finish(tok).expect("text"));
                t.resume(response, 1);
                reply.restart();
            }
            Step::Finished(_) => break,
            _ => {}
        }
    }
    show(reply.finish(tok).expect("text"));
    Ran {
        prompt: prompt.len(),
        answer: t.answer().to_vec(),
        thought,
        text,
        stats: t.stats(),
        resident: s.position(),
    }
}

/// Where the thought of `answer` was closed for good, checked against the budget: the thought
/// tokens of every block (the tool-call tokens `tool(i)` says are left out) run at most to the
/// first line end at or past `budget`, or to the grace; a close that came before that came
/// under the bias. Returns (the close's index, the thought tokens, whether the budget forced it).
fn check_cut(
    answer: &[u32],
    vocab: &ThoughtVocab,
    budget: usize,
    tool: &dyn Fn(usize) -> bool,
) -> (usize, usize, bool) {
    let (mut inside, mut count, mut due) = (false, 0, None);
    let mut last_close = None;
    for (i, &id) in answer.iter().enumerate() {
        match id {
            OPEN => inside = true,
            CLOSE => {
                inside = false;
                last_close = Some((i, count));
            }
            _ if inside && !tool(i) => {
                count += 1;
                if count >= budget
                    && due.is_none()
                    && (vocab.ends_line(id) || count == budget + LINE_GRACE)
                {
                    due = Some(count);
                }
            }
            _ => {}
        }
    }
    let (close, n) = last_close.expect("the thought was closed");
    // Without a cut due, the model closed under the bias, before any was.
    let due = due.unwrap_or(budget + LINE_GRACE);
    assert!(
        n <= due,
        "the thought ran past its cut: {n} tokens, cut due at {due}: {answer:?}"
    );
    assert!(
        n as f32 > budget as f32 * SOFT_SHARE,
        "closed at {n} of {budget}, before the bias"
    );
    (close, n, n == due && n >= budget)
}

/// What the answer after the close is: some tokens, no new thought, text shown as answer.
fn check_answer_follows(r: &Ran, close: usize) {
    let after = &r.answer[close + 1..];
    assert!(!after.is_empty(), "no answer after the thought");
    assert!(!after.contains(&OPEN), "a thought opened again: {after:?}");
    assert!(!after.contains(&CLOSE));
    assert!(!r.text.is_empty(), "the answer showed no text");
}

#[test]
fn the_thought_stops_within_the_budget_and_one_line_and_the_answer_follows() {
    let (_dir, lm) = model();
    let v = vocab(&lm, None);
    let mut forced_seen = false;
    // A newline forced a few tokens past the budget, and none: the close comes at the line end,
    // or after the grace.
    for (budget, newline_at) in [(24, Some(28)), (16, None), (40, Some(45))] {
        let mut forced = opened(tok(&lm));
        forced.extend(at(newline_at, NL));
        let r = run(&lm, options(&v, Some(budget), forced, 200, 7), None, &[]);
        let (close, n, by_force) = check_cut(&r.answer, &v, budget, &|_| false);
        forced_seen |= by_force;
        assert_eq!(r.answer.iter().filter(|&&i| i == CLOSE).count(), 1);
        assert_eq!(r.stats.thought_tokens, n, "{:?}", r.answer);
        check_answer_follows(&r, close);
        if by_force && n < budget + LINE_GRACE {
            assert!(
                v.ends_line(r.answer[close - 1]),
                "cut mid-line: {:?}",
                r.answer
            );
        }
    }
    assert!(forced_seen, "no case reached the forced close");
}

#[test]
fn the_message_is_written_before_the_close() {
    let (_dir, lm) = model();
    let v = vocab(&lm, Some("\nTime to answer.\n"));
    // Every thought token a line end, up to the budget: the cut is due at once, with the message.
    let budget = 8;
    let mut forced = opened(tok(&lm));
    let name = forced.len() - 1;
    forced.extend(at(forced.len()..forced.len() + budget - name, NL));
    let r = run(&lm, options(&v, Some(budget), forced, 120, 3), None, &[]);
    let close = r.answer.iter().position(|&i| i == CLOSE).expect("closed");
    assert_eq!(r.answer.iter().filter(|&&i| i == CLOSE).count(), 1);
    assert!(
        r.thought.ends_with("\nTime to answer.\n"),
        "{:?}",
        r.thought
    );
    assert_eq!(r.stats.thought_tokens, close - 1);
    check_answer_follows(&r, close);
}

#[test]
fn budget_zero_closes_at_once_and_eats_no_token() {
    let (_dir, lm) = model();
    let v = vocab(&lm, None);
    let r = run(&lm, options(&v, Some(0), vec![(0, OPEN)], 12, 5), None, &[]);
    // The close is forced right after the open, with nothing thought.
    assert_eq!(r.answer[..2], [OPEN, CLOSE], "{:?}", r.answer);
    assert_eq!(r.stats.thought_tokens, 0);
    check_answer_follows(&r, 1);
    // Every prompt token prefilled, every answer token resident: nothing was eaten.
    assert_eq!(r.stats.prefilled_tokens, r.prompt);
    assert_eq!(r.resident, r.prompt + r.answer.len());
}

#[test]
fn the_budget_spans_blocks_and_is_not_re_armed() {
    let (_dir, lm) = model();
    let v = vocab(&lm, None);
    // A first block written out (its name line and 6 words), closed, two answer tokens, then a
    // second block with a line end every 4 tokens: the cut is due a few tokens after the turn's
    // count reaches the budget, long before a budget of its own would run out.
    let budget = 20;
    let mut forced = opened(tok(&lm));
    let k = forced.len();
    forced.extend((0..6).map(|i| (k + i, 300 + i as u32)));
    forced.push((k + 6, CLOSE));
    forced.extend([(k + 7, 301), (k + 8, 302)]);
    let second: Vec<(usize, u32)> = opened(tok(&lm));
    let k2 = k + 9;
    forced.extend(second.iter().map(|&(i, id)| (k2 + i, id)));
    forced.extend(at((k2 + second.len()..k2 + 120).step_by(4), NL));
    let r = run(&lm, options(&v, Some(budget), forced, 200, 11), None, &[]);
    let (close, n, _) = check_cut(&r.answer, &v, budget, &|_| false);
    let counts = blocks(&r.answer);
    assert_eq!(counts.len(), 2, "{:?}", r.answer);
    assert_eq!(counts[0], k - 1 + 6);
    assert_eq!(n, counts[0] + counts[1]);
    assert!(
        counts[1] < budget,
        "the second block took {} tokens, a budget of its own: {:?}",
        counts[1],
        r.answer
    );
    assert!(close > k2, "{:?}", r.answer);
    assert_eq!(r.answer.iter().filter(|&&i| i == CLOSE).count(), 2);
    assert_eq!(r.stats.thought_tokens, n);
    check_answer_follows(&r, close);
}

#[test]
fn a_speculating_turn_thinks_and_closes_its_thought_as_a_plain_one() {
    let (_dir, lm) = model();
    let v = vocab(&lm, Some("\nTime to answer.\n"));
    let mut drafted = 0;
    for (budget, newline_at, seed) in [(24, Some(28), 7), (16, None, 3), (8, Some(9), 5)] {
        let mut forced = opened(tok(&lm));
        forced.extend(at(newline_at, NL));
        let plain = run(
            &lm,
            options(&v, Some(budget), forced.clone(), 160, seed),
            None,
            &[],
        );
        let mut opts = options(&v, Some(budget), forced, 160, seed);
        opts.speculation = gemma_engine::protocol::Speculation {
            kind: gemma_engine::protocol::Speculate::Lookup,
            draft_max: 8,
        };
        let spec = run(&lm, opts, None, &[]);
        assert_eq!(spec.answer, plain.answer, "budget {budget}");
        assert_eq!((spec.thought, spec.text), (plain.thought, plain.text));
        assert_eq!(spec.stats.thought_tokens, plain.stats.thought_tokens);
        assert_eq!(spec.resident, plain.resident);
        drafted += spec.stats.speculation.map_or(0, |s| s.drafted);
    }
    assert!(drafted > 0, "no draft was checked");
}

/// A guide for calls of `find{q:string}`, as the engine builds one.
fn call_guide(tok: &Tokenizer) -> (CallGuide, ToolIds) {
    let ids = ToolIds::of(tok).expect("tool ids");
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"]
    });
    let grammar = CallGrammar::new(&[("find".into(), schema)]).expect("grammar");
    let vocab = Vocab::new(tok.vocab_bytes(), ids.quote, ids.call_end);
    let guide = CallGuide::new(
        Arc::new(grammar),
        Arc::new(vocab),
        ids,
        ToolChoice::Auto,
        1,
        24,
    );
    (guide, ids)
}

#[test]
fn a_tool_call_is_never_cut() {
    let (_dir, lm) = model();
    let v = vocab(&lm, None);
    let (guide, ids) = call_guide(tok(&lm));
    let response = tok(&lm)
        .encode("response:find{r:1}<tool_response|>")
        .expect("encodes");
    // The budget runs out with the name line and two more thought tokens; a call starts right
    // after, inside the thought: it is written whole, and the close comes after the tools
    // answered.
    let mut forced = opened(tok(&lm));
    let budget = forced.len() - 1 + 2;
    let call = forced.len() + 2;
    forced.push((call, ids.call));
    let r = run(
        &lm,
        options(&v, Some(budget), forced, 120, 2),
        Some(Box::new(guide)),
        &response,
    );
    let end = r
        .answer
        .iter()
        .position(|&i| i == ids.call_end)
        .expect("the call ended");
    let hand_over = r
        .answer
        .iter()
        .position(|&i| i == ids.response)
        .expect("handed over");
    assert!(end < hand_over);
    let close = r.answer.iter().position(|&i| i == CLOSE).expect("closed");
    assert!(
        close > hand_over + response.len(),
        "the close came inside the call or its response: {:?}",
        r.answer
    );
    let tool = |i: usize| (call..=hand_over + response.len()).contains(&i);
    let (last, n, _) = check_cut(&r.answer, &v, budget, &tool);
    assert_eq!((last, n), (close, r.stats.thought_tokens));
    assert_eq!(r.answer.iter().filter(|&&i| i == CLOSE).count(), 1);
    check_answer_follows(&r, close);
}

#[test]
fn the_engine_streams_the_count_and_reports_it() {
    let dir = fixture("gemma4_e2b_style", None);
    let path = dir.path().to_path_buf();
    let tok = Tokenizer::from_file(&path.join("tokenizer.json")).expect("tokenizer");
    // The thought opened, then line ends up to the budget: the cut comes with the message.
    let budget = 12;
    let mut forced = opened(&tok);
    forced.extend(at(forced.len()..forced.len() + budget, NL));
    let options = EngineOptions {
        forced,
        thinking_message: Some("Done thinking.".into()),
        ..EngineOptions::default()
    };
    let h = spawn(options, move |progress| {
        load(&path, &Device::flex(), ComputeDtype::F32, &mut |d, t| {
            progress.layers(d, t)
        })
    });
    assert!(matches!(first_after_loading(&h), Event::Ready { .. }));
    open(&h, 1);
    let settings = TabSettings {
        max_new_tokens: 100,
        thinking: true,
        thought_budget: Some(budget),
        ..TabSettings::default()
    };
    crate::common::chat::configure(&h, 1, settings);
    h.send(Command::Submit {
        tab: 1,
        text: "Why is the sky blue?".into(),
        images: Vec::new(),
    });
    let (mut counts, mut thought) = (Vec::new(), String::new());
    let stats = loop {
        match h
            .events
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Thought { text, tokens, .. } => {
                counts.push(tokens);
                thought.push_str(&text);
            }
            Event::Finished { end, stats, .. } => {
                assert_ne!(end, TurnEnd::Cancelled);
                break stats;
            }
            Event::Failed { error, .. } => panic!("{error}"),
            _ => {}
        }
    };
    assert!(!counts.is_empty() && counts.is_sorted(), "{counts:?}");
    assert_eq!(counts.last(), Some(&stats.thought_tokens));
    assert!(stats.thought_tokens > budget, "{stats:?}");
    assert!(thought.ends_with("Done thinking."), "{thought:?}");
    // The markers and the thought are part of the answer's tokens.
    assert!(
        stats.generated_tokens >= stats.thought_tokens + 2,
        "{stats:?}"
    );
}
