//! `gemma-chat bench`: load time, prefill and decode speed, time to first token for a cold
//! 2,000-token history and for a warm 20-token follow-up on it (and on an empty history), and
//! memory: peak RSS of load + prefill + decode (the figure to hold against llama-bench's on the
//! same file), weight bytes per GGML type, mapped in place against owned, and RSS with one and
//! with eight open sessions; with `--image FILE`, the picture's preprocessing and encoding by the
//! vision tower, and with `--audio FILE` the recording's decoding, resampling and features and
//! its encoding by the audio tower. Text, or one JSON object with `--json`. `benches/compare.py`
//! measures llama.cpp on the same file, prompt and thread count.

use std::time::Instant;

use anyhow::Context;
use clap::Args;
use gemma_engine::protocol::TurnStats;
use gemma_engine::session::Session;
use gemma_engine::turn::{Turn, TurnOptions};
use gemma_model::model::Gemma;
use gemma_model::model::kv_cache::KvCache;
use serde_json::json;

use super::ModelArgs;
use super::generate::load_model;

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Prompt tokens for the prefill figure.
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Tokens for the decode figure.
    #[arg(long, default_value_t = 128)]
    decode_tokens: usize,
    /// History tokens for the time-to-first-token figures.
    #[arg(long, default_value_t = 2000)]
    history_tokens: usize,
    /// Stop after prefill and decode: no time-to-first-token or multi-session figures.
    #[arg(long)]
    no_sessions: bool,
    /// Also time decode after a history of this many tokens (llama-bench's `-d`).
    #[arg(long, default_value_t = 0)]
    depth: usize,
    /// With `--image FILE`: also time the picture's preprocessing and its encoding by the
    /// model's vision tower at `--image-tokens`; with `--audio FILE`, the recording's first
    /// 30 seconds by the audio tower.
    #[command(flatten)]
    images: super::images::ImageArgs,
}

/// The same English text the llama.cpp script uses, repeated to the length asked.
const TEXT: &str = "The history of the lighthouse begins with fires lit on hills to guide \
    ships home. Over the centuries these became towers of stone, then of iron, with lenses that \
    gathered the light of a single flame into a beam seen thirty miles out at sea. Keepers \
    lived in small houses at their feet, trimming wicks, winding clockwork and logging the \
    weather through long nights. ";

fn ids(lm: &gemma_model::checkpoint::LoadedModel, n: usize) -> anyhow::Result<Vec<u32>> {
    let tok = lm
        .tokenizer
        .as_ref()
        .context("the model has no tokenizer")?;
    let mut ids = vec![lm.model.config().bos_token_id];
    while ids.len() < n {
        ids.extend(tok.encode(TEXT)?);
    }
    ids.truncate(n);
    Ok(ids)
}

/// Resident set size now and at its peak, in MiB (Linux `/proc/self/status`).
fn rss_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Runs one greedy turn of `n` answer tokens on `prompt` (the whole conversation) in `s`, with
/// no end ids (a fixed count), the way every turn runs; what it cost.
fn turn(m: &Gemma, s: &mut Session, prompt: &[u32], n: usize) -> anyhow::Result<TurnStats> {
    let mut opts = TurnOptions::greedy(n, m.config().max_position_embeddings);
    opts.chunk = 512;
    let mut t = Turn::start(s, prompt.to_vec(), opts)?;
    t.run(m, s, &mut |_| true)?;
    Ok(t.stats())
}

/// What the model's cache keeps: the host KV type, or the compute dtype on the device.
pub(super) fn kv_dtype_name(m: &Gemma) -> String {
    m.host_kv_dtype()
        .map_or_else(|| format!("{:?} (device)", m.dtype()), |t| t.to_string())
}

/// The median of a few timings.
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The 1-minute load average (`/proc/loadavg`), empty where there is none.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_default()
}

/// Runs `bench`.
pub fn run(args: BenchArgs, common: &ModelArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let (mut lm, dtype) = load_model(common)?;
    let load_s = t0.elapsed().as_secs_f64();
    let vision = encode_figures(&mut lm, common, &args.images)?;
    let audio = audio_figures(&lm, common, &args.images)?;
    let weights = lm.model.weight_stats();
    let m = &lm.model;

    // Prefill of a prompt, then decode from it (end ids ignored: a fixed token count).
    let prompt = ids(&lm, args.prompt_tokens)?;
    let mut session = Session::new(m);
    let first = turn(m, &mut session, &prompt, args.decode_tokens)?;
    let kv_bytes = session.device_bytes();
    drop(session);
    let (_, peak_generate) = rss_mb();
    // Decode after a long history, and the bytes its cache then holds.
    let depth = if args.depth > 0 {
        let history = ids(&lm, args.depth)?;
        let mut s = Session::new(m);
        let tok_s = turn(m, &mut s, &history, args.decode_tokens)?.decode_tok_s;
        Some((tok_s, s.device_bytes()))
    } else {
        None
    };
    let mb = |b: usize| b as f64 / (1 << 20) as f64;
    let by_type: serde_json::Map<String, serde_json::Value> = weights
        .by_type
        .iter()
        .map(|(k, &v)| (k.clone(), json!(mb(v))))
        .collect();
    let load_avg = load_average();
    let threads = rayon::current_num_threads();
    let mut out = json!({
        "model": lm.path.display().to_string(),
        "dtype": dtype.as_str(),
        "kv_dtype": kv_dtype_name(m),
        "threads": threads,
        "simd": gemma_kernels::qmatmul::simd::level().name(),
        "load_avg_1m": load_avg,
        "load_s": load_s,
        "prefill_tokens": prompt.len(),
        "prefill_tok_s": first.prefill_tok_s,
        "decode_tokens": first.generated_tokens,
        "decode_tok_s": first.decode_tok_s,
        "peak_rss_mb": peak_generate,
        "weights_mb_by_type": by_type,
        "weights_mapped_mb": mb(weights.mapped),
        "weights_owned_mb": mb(weights.owned),
        "host_matrices": weights.host_matrices,
        "device_weights_mb": mb(weights.device),
        "device_quantized_matrices": weights.device_quantized,
        "kv_bytes": kv_bytes,
    });
    for figures in [vision, audio] {
        if let (Some(o), serde_json::Value::Object(v)) = (out.as_object_mut(), figures) {
            o.extend(v);
        }
    }
    if let (Some((v, bytes)), Some(o)) = (depth, out.as_object_mut()) {
        o.insert("depth_tokens".into(), json!(args.depth));
        o.insert("decode_at_depth_tok_s".into(), json!(v));
        o.insert("depth_kv_bytes".into(), json!(bytes));
    }
    if !args.no_sessions {
        sessions_figures(m, &lm, &args, &prompt, &mut out)?;
    }
    let spec = super::bench_spec::asked(&lm, common, args.decode_tokens, &mut out)?;
    if args.json {
        outln!("{out}")?;
    } else {
        print_text(&out)?;
        if let Some(v) = &spec {
            super::bench_spec::print(v)?;
        }
    }
    Ok(())
}

/// The first `--image`'s figures: its preprocessing (decode, resize, patches) and its encoding
/// by the tower, each the median of three runs.
fn encode_figures(
    lm: &mut gemma_model::checkpoint::LoadedModel,
    common: &ModelArgs,
    args: &super::images::ImageArgs,
) -> anyhow::Result<serde_json::Value> {
    let Some(path) = args.images.first() else {
        return Ok(json!({}));
    };
    super::images::check_budget(args.image_tokens)?;
    let t0 = Instant::now();
    let mmproj = common.choice(&common.config()?)?.mmproj;
    let tower = gemma_model::vision::open_for(lm, mmproj.as_deref(), None)?;
    let tower_load_s = t0.elapsed().as_secs_f64();
    let bytes = gemma_files::read_limited(path, gemma_media::picture::MAX_FILE)
        .with_context(|| format!("reading {}", path.display()))?;
    let side = tower.spec().input_side() as u32;
    let (mut pre, mut enc, mut tokens) = (Vec::new(), Vec::new(), 0);
    for _ in 0..3 {
        let t = Instant::now();
        let picture = gemma_media::Picture::decode(&bytes, &path.display().to_string())?;
        let p = gemma_media::patches_of(&picture.rgb, args.image_tokens, side)?;
        pre.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let rows = tower.encode(gemma_model::vision::PatchInput {
            values: &p.values,
            positions: &p.positions,
        })?;
        enc.push(t.elapsed().as_secs_f64());
        tokens = rows.len() / tower.spec().text_hidden.max(1);
    }
    Ok(json!({
        "image": path.display().to_string(),
        "image_budget": args.image_tokens,
        "image_tokens": tokens,
        "tower_load_s": tower_load_s,
        "image_preprocess_ms": median(pre) * 1e3,
        "image_encode_ms": median(enc) * 1e3,
    }))
}

/// The first `--audio`'s figures: its preprocessing (decode, resample to 16 kHz, the first
/// piece's features) and that piece's encoding by the audio tower, each the median of three.
fn audio_figures(
    lm: &gemma_model::checkpoint::LoadedModel,
    common: &ModelArgs,
    args: &super::images::ImageArgs,
) -> anyhow::Result<serde_json::Value> {
    use gemma_media::audio::{Clip, features};
    let Some(path) = args.audio.first() else {
        return Ok(json!({}));
    };
    let mmproj = common.choice(&common.config()?)?.mmproj;
    let tower = gemma_model::audio::open_for(lm, mmproj.as_deref())?;
    let (mut pre, mut enc, mut tokens, mut seconds) = (Vec::new(), Vec::new(), 0, 0.0);
    for _ in 0..3 {
        let t = Instant::now();
        let clip = Clip::open(path).with_context(|| format!("reading {}", path.display()))?;
        let piece = clip.pieces().next().unwrap_or_default();
        let f = features(piece);
        pre.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let rows = tower.encode(&f.values, &f.mask)?;
        enc.push(t.elapsed().as_secs_f64());
        tokens = rows.len() / tower.spec().text_hidden.max(1);
        seconds = piece.len() as f64 / f64::from(gemma_media::audio::SAMPLE_RATE);
    }
    Ok(json!({
        "audio": path.display().to_string(),
        "audio_seconds": seconds,
        "audio_tokens": tokens,
        "audio_preprocess_ms": median(pre) * 1e3,
        "audio_encode_ms": median(enc) * 1e3,
    }))
}

/// Time to first token, cold and warm, and memory with one and eight open sessions, added to
/// `out`.
fn sessions_figures(
    m: &Gemma,
    lm: &gemma_model::checkpoint::LoadedModel,
    args: &BenchArgs,
    prompt: &[u32],
    out: &mut serde_json::Value,
) -> anyhow::Result<()> {
    // Time to first token: a cold history, then 20-token follow-ups on it (history 2000, 2020,
    // 2040), each next to the same turn on an empty history; the medians of the three pairs.
    let history = ids(lm, args.history_tokens)?;
    let follow: Vec<u32> = ids(lm, 21)?[1..].to_vec();
    let mut short = vec![m.config().bos_token_id];
    short.extend(&follow);
    let mut s = Session::new(m);
    let cold = turn(m, &mut s, &history, 1)?;
    let reused = s.position();
    let (mut warm, mut empty, mut prefilled) = (Vec::new(), Vec::new(), 0);
    for i in 0..3 {
        let convo = [s.resident(), &follow].concat();
        let stats = turn(m, &mut s, &convo, 1)?;
        warm.push(stats.ttft_s);
        if i == 0 {
            prefilled = stats.prefilled_tokens;
        }
        empty.push(turn(m, &mut Session::new(m), &short, 1)?.ttft_s);
    }
    let (ttft_warm, ttft_warm_empty) = (median(warm), median(empty));
    drop(s);

    // Memory: one open session with a prompt-sized history, then eight.
    let mut sessions = vec![Session::new(m)];
    turn(m, &mut sessions[0], prompt, 1)?;
    let (rss_1, _) = rss_mb();
    for _ in 1..8 {
        let mut s = Session::new(m);
        turn(m, &mut s, prompt, 1)?;
        sessions.push(s);
    }
    let (rss_8, peak) = rss_mb();
    let elem = m.kv_value_bytes();
    let kv_mb = KvCache::estimate_bytes(m.config(), elem, prompt.len()) as f64 / (1 << 20) as f64;
    let extra = json!({
        "history_tokens": history.len(),
        "ttft_cold_ms": cold.ttft_s * 1e3,
        "ttft_warm_ms": ttft_warm * 1e3,
        "ttft_warm_empty_ms": ttft_warm_empty * 1e3,
        "warm_reused_tokens": reused,
        "warm_prefilled_tokens": prefilled,
        "rss_mb": rss_1,
        "rss_8_sessions_mb": rss_8,
        "peak_rss_8_sessions_mb": peak,
        "kv_session_estimate_mb": kv_mb,
    });
    if let (Some(o), serde_json::Value::Object(e)) = (out.as_object_mut(), extra) {
        o.extend(e);
    }
    Ok(())
}

/// The figures as text.
fn print_text(out: &serde_json::Value) -> std::io::Result<()> {
    let f = |k: &str| out[k].as_f64().unwrap_or(0.0);
    let n = |k: &str| out[k].as_u64().unwrap_or(0);
    outln!(
        "model            {} ({}, KV cache {})",
        out["model"],
        out["dtype"],
        out["kv_dtype"]
    )?;
    outln!(
        "threads          {} (load average {}), SIMD {}",
        out["threads"],
        out["load_avg_1m"],
        out["simd"].as_str().unwrap_or("?")
    )?;
    outln!("load             {:.2} s", f("load_s"))?;
    let types: Vec<String> = out["weights_mb_by_type"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k} {:.1}", v.as_f64().unwrap_or(0.0)))
                .collect()
        })
        .unwrap_or_default();
    outln!(
        "weights          {:.0} MiB mapped in place, {:.1} MiB owned; MiB by type: {}",
        f("weights_mapped_mb"),
        f("weights_owned_mb"),
        types.join(", ")
    )?;
    outln!(
        "device           {:.1} MiB of weights in tensors ({} matrices in their blocks), KV \
         cache {:.1} MiB after the turn",
        f("device_weights_mb"),
        n("device_quantized_matrices"),
        f("kv_bytes") / (1 << 20) as f64
    )?;
    outln!(
        "prefill          {:.1} tok/s ({} tokens)",
        f("prefill_tok_s"),
        n("prefill_tokens")
    )?;
    outln!(
        "decode           {:.1} tok/s ({} tokens)",
        f("decode_tok_s"),
        n("decode_tokens")
    )?;
    if out.get("decode_at_depth_tok_s").is_some() {
        outln!(
            "decode at depth  {:.1} tok/s after {} tokens (KV cache {:.1} MiB)",
            f("decode_at_depth_tok_s"),
            n("depth_tokens"),
            f("depth_kv_bytes") / (1 << 20) as f64
        )?;
    }
    outln!(
        "peak memory      {:.0} MiB (load, prefill, decode)",
        f("peak_rss_mb")
    )?;
    print_media(out)?;
    print_sessions(out)
}

/// The picture's and the recording's figures, when measured.
fn print_media(out: &serde_json::Value) -> std::io::Result<()> {
    let f = |k: &str| out[k].as_f64().unwrap_or(0.0);
    let n = |k: &str| out[k].as_u64().unwrap_or(0);
    if out.get("image_encode_ms").is_some() {
        outln!(
            "image            {} tokens (budget {}): preprocess {:.1} ms, encode {:.1} ms (tower loaded in {:.2} s)",
            n("image_tokens"),
            n("image_budget"),
            f("image_preprocess_ms"),
            f("image_encode_ms"),
            f("tower_load_s")
        )?;
    }
    if out.get("audio_encode_ms").is_some() {
        outln!(
            "audio            {} tokens ({:.1} s): decode + resample + features {:.1} ms, encode {:.1} ms",
            n("audio_tokens"),
            f("audio_seconds"),
            f("audio_preprocess_ms"),
            f("audio_encode_ms")
        )?;
    }
    Ok(())
}

/// The warm-session figures (`--history`), when measured.
fn print_sessions(out: &serde_json::Value) -> std::io::Result<()> {
    let f = |k: &str| out[k].as_f64().unwrap_or(0.0);
    let n = |k: &str| out[k].as_u64().unwrap_or(0);
    if out.get("ttft_cold_ms").is_none() {
        return Ok(());
    }
    outln!(
        "ttft cold        {:.0} ms ({} history tokens)",
        f("ttft_cold_ms"),
        n("history_tokens")
    )?;
    outln!(
        "ttft warm        {:.0} ms (reused {}, prefilled {}); on an empty history {:.0} ms",
        f("ttft_warm_ms"),
        n("warm_reused_tokens"),
        n("warm_prefilled_tokens"),
        f("ttft_warm_empty_ms")
    )?;
    outln!(
        "memory           {:.0} MiB with 1 session, {:.0} MiB with 8 (KV estimate {:.1} MiB each), peak {:.0} MiB",
        f("rss_mb"),
        f("rss_8_sessions_mb"),
        f("kv_session_estimate_mb"),
        f("peak_rss_8_sessions_mb")
    )
}
