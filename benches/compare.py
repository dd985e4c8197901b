"""gemma-chat against llama.cpp's own llama-bench on the same GGUF and thread count, alternated
in one run: prefill of a 512-token prompt (pp512), decode of 128 tokens (tg128), and decode at a
4,096-token context (tg128 @ d4096). Prints the medians, the ratios and the CPU's SIMD level.

    cargo build --release
    python3 benches/compare.py [--model PATH] [--threads 2] [--rounds 3] [--depth 4096] [--json]
                               [--simd avx2]

llama-bench is built by scripts/llama-cpp.sh from the llama.cpp tree vendored in the
llama-cpp-python 0.3.36 sdist, with -DGGML_NATIVE=OFF and the SIMD flags /proc/cpuinfo lists
(cached outside the repository). llama-cpp-python's Python loop is not the peer: it measured two
to three times slower than llama-bench on the same file. Without --model, gemma-chat's demo
model is used. Each side runs greedy and ignores stop tokens.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def simd_level():
    flags = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
              "avx512vbmi", "avx_vnni", "amx_tile", "amx_int8"]
    return " ".join(f for f in wanted if f in flags) or "no AVX2"


def ours(binary, model, threads, depth, simd):
    cmd = [binary, "bench", "--json", "--no-sessions", "--prompt-tokens", "512",
           "--decode-tokens", "128", "--depth", str(depth)]
    if model:
        cmd += ["--model", model]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    if simd:
        env["GEMMA_CHAT_SIMD"] = simd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"model": r["model"], "pp512": r["prefill_tok_s"], "tg128": r["decode_tok_s"],
            "tg128_depth": r.get("decode_at_depth_tok_s")}


def llama(bench, model, threads, depth):
    def run(*args):
        out = subprocess.run([str(bench), "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
                              *args], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    rows = run("-p", "512", "-n", "128")
    got = {"pp512": next(r["avg_ts"] for r in rows if r["n_prompt"] == 512),
           "tg128": next(r["avg_ts"] for r in rows if r["n_gen"] == 128)}
    got["tg128_depth"] = run("-p", "0", "-n", "128", "-d", str(depth))[0]["avg_ts"] if depth else None
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--binary", default=str(ROOT / "target/release/gemma-chat"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--simd", choices=["avx2"],
                    help="both sides at most at this level: GEMMA_CHAT_SIMD for ours, a llama-bench "
                         "built with the flags up to it (what an AVX2-only CPU runs)")
    a = ap.parse_args()
    env = dict(os.environ, **({"LLAMA_SIMD": a.simd} if a.simd else {}))
    bin_dir = subprocess.run([str(ROOT / "scripts/llama-cpp.sh")], check=True, capture_output=True,
                             text=True, env=env).stdout.strip().splitlines()[-1]
    load_before = os.getloadavg()[0]
    runs = {"gemma_chat": [], "llama_bench": []}
    model = a.model
    for _ in range(a.rounds):
        g = ours(a.binary, model, a.threads, a.depth, a.simd)
        model = model or g["model"]
        runs["gemma_chat"].append(g)
        runs["llama_bench"].append(llama(Path(bin_dir) / "llama-bench", model, a.threads, a.depth))
    keys = ["pp512", "tg128"] + (["tg128_depth"] if a.depth else [])
    med = {side: {k: statistics.median(r[k] for r in rs) for k in keys} for side, rs in runs.items()}
    result = {
        "model": model, "threads": a.threads, "rounds": a.rounds, "depth": a.depth,
        "simd": simd_level(), "simd_cap": a.simd, "load_avg_1m_before": load_before,
        "load_avg_1m_after": os.getloadavg()[0], "runs": runs, "medians": med,
        "ratios": {k: med["gemma_chat"][k] / med["llama_bench"][k] for k in keys},
    }
    if a.json:
        print(json.dumps(result))
        return 0
    print(f"model {model}, {a.threads} threads, {a.rounds} rounds alternated, "
          f"load average {load_before:.2f} before, {result['load_avg_1m_after']:.2f} after")
    print(f"CPU SIMD: {result['simd']}" + (f" (both sides capped at {a.simd})" if a.simd else ""))
    print(f"{'tok/s (median)':22} {'gemma-chat':>11} {'llama-bench':>12} {'ratio':>7}   all runs (ours / theirs)")
    names = {"pp512": "prefill pp512", "tg128": "decode tg128", "tg128_depth": f"decode tg128 @ d{a.depth}"}
    for k in keys:
        each = ", ".join(f"{g[k]:.1f}/{l[k]:.1f}" for g, l in zip(runs["gemma_chat"], runs["llama_bench"]))
        print(f"{names[k]:22} {med['gemma_chat'][k]:11.1f} {med['llama_bench'][k]:12.1f} "
              f"{result['ratios'][k]:7.2f}   {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
