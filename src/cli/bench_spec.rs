//! `bench --speculate KIND`: decoding with and without speculation on the same prompts, in the
//! same run, alternated: a copy-heavy prompt (a passage the answer goes on repeating) and a
//! short prose one, each the median of three runs a side; the ids compared (they must be the
//! same), and what the checks did (drafted, accepted, tokens a step).

use anyhow::Context;
use serde_json::{Value, json};

use gemma_engine::protocol::{Speculate, Speculation, TurnStats};
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::checkpoint::LoadedModel;
use gemma_model::model::Logits;
use std::time::Instant;

/// A function the answer is asked to copy out again.
const CODE: &str = "fn checksum(data: &[u8]) -> u32 {\n    let mut a: u32 = 1;\n    let mut b: u32 = \
    0;\n    for &byte in data {\n        a = (a + byte as u32) % 65521;\n        b = (b + a) % \
    65521;\n    }\n    (b << 16) | a\n}\n\n";

/// Prose that is not repeated.
const PROSE: &str = "Write a short story about a keeper who finds a letter in a bottle on the \
    rocks below the lighthouse, and what she decides to do with it.\n\n";

/// One greedy turn of `n` tokens on `prompt` from a fresh session: its stats and ids.
fn run(
    lm: &LoadedModel,
    prompt: &[u32],
    n: usize,
    s: Speculation,
) -> anyhow::Result<(TurnStats, Vec<u32>)> {
    let m = &lm.model;
    let mut session = Session::new(m);
    let opts = TurnOptions {
        chunk: 512,
        speculation: s,
        ..TurnOptions::greedy(n, m.config().max_position_embeddings)
    };
    let mut t = Turn::start(&mut session, prompt.to_vec(), opts)?;
    t.run(m, &mut session, &mut |_| true)?;
    Ok((t.stats(), t.answer().to_vec()))
}

/// The figures of one prompt: plain and speculative decode speed (medians), their ratio, the
/// checks' counts and whether the ids were the same.
fn figures(lm: &LoadedModel, prompt: &[u32], n: usize, s: Speculation) -> anyhow::Result<Value> {
    let off = Speculation {
        kind: Speculate::Off,
        ..s
    };
    let (mut plain, mut spec) = (Vec::new(), Vec::new());
    let mut same = true;
    let mut last = None;
    for _ in 0..3 {
        let (p, ids) = run(lm, prompt, n, off)?;
        let (q, spec_ids) = run(lm, prompt, n, s)?;
        same &= ids == spec_ids;
        plain.push(p.decode_tok_s);
        spec.push(q.decode_tok_s);
        last = q.speculation;
    }
    let (p, q) = (super::bench::median(plain), super::bench::median(spec));
    let c = last.unwrap_or_default();
    Ok(json!({
        "prompt_tokens": prompt.len(),
        "plain_tok_s": p,
        "spec_tok_s": q,
        "ratio": q / p.max(1e-9),
        "drafted": c.drafted,
        "accepted": c.accepted,
        "acceptance": c.acceptance(),
        "tokens_per_step": c.tokens_per_step(),
        "switched_off": c.off,
        "same_ids": same,
    }))
}

/// What a check of `n` rows costs against a step of one, at the end of `prompt` (medians of five
/// forwards from the same cache): the figure that bounds what speculation can gain here.
fn check_cost(lm: &LoadedModel, prompt: &[u32]) -> anyhow::Result<Value> {
    let m = &lm.model;
    let mut cache = m.new_cache();
    m.forward(prompt, &mut cache, 0, Logits::None)?;
    let time = |n: usize| -> anyhow::Result<f64> {
        let ids = vec![prompt[prompt.len() - 1]; n];
        let mode = if n == 1 { Logits::Last } else { Logits::All };
        let mut v = Vec::new();
        for _ in 0..5 {
            let mut c = cache.clone();
            let t0 = Instant::now();
            m.forward(&ids, &mut c, prompt.len(), mode)?;
            v.push(t0.elapsed().as_secs_f64());
        }
        Ok(super::bench::median(v))
    };
    let one = time(1)?;
    let (three, nine) = (time(3)?, time(9)?);
    Ok(json!({
        "step_ms": 1e3 * one,
        "check_3_ms": 1e3 * three,
        "check_9_ms": 1e3 * nine,
        "check_3_over_step": three / one.max(1e-12),
        "check_9_over_step": nine / one.max(1e-12),
    }))
}

/// The speculation figures for `--speculate KIND` (`None`: not asked, or `off`).
fn speculation_figures(
    lm: &LoadedModel,
    s: Speculation,
    n: usize,
) -> anyhow::Result<Option<Value>> {
    if s.kind == Speculate::Off {
        return Ok(None);
    }
    let tok = lm
        .tokenizer
        .as_ref()
        .context("the model has no tokenizer")?;
    let bos = lm.model.config().bos_token_id;
    let mut copy = vec![bos];
    copy.extend(tok.encode(&CODE.repeat(3))?);
    let mut prose = vec![bos];
    prose.extend(tok.encode(PROSE)?);
    Ok(Some(json!({
        "kind": s.kind.to_string(),
        "draft_max": s.draft_max,
        "copy": figures(lm, &copy, n, s)?,
        "prose": figures(lm, &prose, n, s)?,
        "check_cost": check_cost(lm, &copy)?,
    })))
}

/// The speculation figures `--speculate KIND` asks for (only then: `bench`'s decode figures are
/// plain decoding's), added to `out` as `speculate`.
pub fn asked(
    lm: &LoadedModel,
    common: &super::ModelArgs,
    n: usize,
    out: &mut Value,
) -> anyhow::Result<Option<Value>> {
    let Some(kind) = common.speculate else {
        return Ok(None);
    };
    let draft_max = common.config()?.speculate.draft_max;
    let v = speculation_figures(lm, Speculation { kind, draft_max }, n)?;
    if let (Some(v), Some(o)) = (&v, out.as_object_mut()) {
        o.insert("speculate".into(), v.clone());
    }
    Ok(v)
}

/// The text lines of the speculation figures.
pub fn print(v: &Value) -> std::io::Result<()> {
    for case in ["copy", "prose"] {
        let c = &v[case];
        let f = |k: &str| c[k].as_f64().unwrap_or(0.0);
        outln!(
            "speculate {:<6} {} ({}): {:.1} → {:.1} tok/s ({:.2}×), {:.0}% of {} drafted kept, \
             {:.2} tokens/step{}{}",
            case,
            v["kind"].as_str().unwrap_or("?"),
            v["draft_max"],
            f("plain_tok_s"),
            f("spec_tok_s"),
            f("ratio"),
            100.0 * f("acceptance"),
            c["drafted"],
            f("tokens_per_step"),
            if c["switched_off"].as_bool() == Some(true) {
                ", then off"
            } else {
                ""
            },
            if c["same_ids"].as_bool() == Some(true) {
                ", same ids"
            } else {
                ", IDS DIFFER"
            },
        )?;
    }
    let c = &v["check_cost"];
    let f = |k: &str| c[k].as_f64().unwrap_or(0.0);
    outln!(
        "speculate check  a step of 1 row {:.1} ms; a check of 3 rows {:.2}×, of 9 rows {:.2}×",
        f("step_ms"),
        f("check_3_over_step"),
        f("check_9_over_step")
    )?;
    Ok(())
}
