"""gemma-chat against llama.cpp's own llama-bench on the same GGUF and thread count, alternated
in one run: prefill of a 512-token prompt (pp512), decode of 128 tokens (tg128), and decode after
a history of each `--depth` (tg128 @ d4096 by default; `--depth 4096,16384,32768` for several).
Prints the medians, the ratios, the CPU's model and SIMD flags, the level each side ran at, the
kernels each side spent a decode in (sampled with `perf` where it is installed: the functions' own
names, not a claim; `--no-profile` skips it), and the KV cache type both sides used (`--kv`: gemma-chat's `--kv-dtype`, llama-bench's `-ctk/-ctv`; by
default each side's own default, f16 on both).

    cargo build --release
    python3 benches/compare.py [--model PATH] [--threads 2] [--rounds 3] [--depth 4096[,16384]]
                               [--kv f32|f16|q8_0] [--json] [--simd avx2] [--no-profile]

llama-bench is built by scripts/llama-cpp.sh from the llama.cpp tree vendored in the
llama-cpp-python 0.3.36 sdist, with -DGGML_NATIVE=OFF and the SIMD flags /proc/cpuinfo lists
(cached outside the repository). llama-cpp-python's Python loop is not the peer: it measured two
to three times slower than llama-bench on the same file. Without --model, gemma-chat's demo
model is used. Each side runs greedy and ignores stop tokens.
"""

import argparse
import json
import os
import re
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


def cpu_model():
    """The CPU's model name, vendor, family and model numbers (what decides the kernels' speed)."""
    info = {}
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "vendor_id", "cpu family", "model") and key not in info:
            info[key] = value.strip()
        if not line.strip() and info:
            break
    return (f"{info.get('model name', '?')} ({info.get('vendor_id', '?')}, family "
            f"{info.get('cpu family', '?')} model {info.get('model', '?')})")


def hot_functions(cmd, env=None, top=6):
    """The functions `cmd` spent most of its samples in (`perf record`), as (share %, name), or
    None without perf."""
    data = f"/tmp/compare-perf-{os.getpid()}.data"
    try:
        rec = subprocess.run(["perf", "record", "-F", "999", "-o", data, "--", *cmd],
                             capture_output=True, text=True, env=env)
        if rec.returncode != 0:
            return None
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol",
                              "--stdio"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return None
    finally:
        if os.path.exists(data):
            os.remove(data)
    hot = []
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(.+?)\s*$", line)
        if m:
            name = re.sub(r"::h[0-9a-f]{16}$", "", m[2].split("  ")[0].strip())
            hot.append((float(m[1]), name[:70]))
        if len(hot) == top:
            break
    return hot


def profiles(binary, bench, model, threads, simd):
    """Where one decode of 256 tokens goes on each side."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    if simd:
        env["GEMMA_CHAT_SIMD"] = simd
    ours_cmd = [binary, "bench", "--no-sessions", "--prompt-tokens", "16", "--decode-tokens", "256",
                "--model", model]
    theirs_cmd = [str(bench), "-m", model, "-t", str(threads), "-r", "1", "-p", "0", "-n", "256"]
    return {"gemma_chat": hot_functions(ours_cmd, env), "llama_bench": hot_functions(theirs_cmd)}


def ours(binary, model, threads, depth, simd, kv):
    cmd = [binary, "bench", "--json", "--no-sessions", "--prompt-tokens", "512",
           "--decode-tokens", "128", "--depth", str(depth)]
    if model:
        cmd += ["--model", model]
    if kv:
        cmd += ["--kv-dtype", kv]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    if simd:
        env["GEMMA_CHAT_SIMD"] = simd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"model": r["model"], "pp512": r["prefill_tok_s"], "tg128": r["decode_tok_s"],
            "tg128_depth": r.get("decode_at_depth_tok_s"), "simd": r.get("simd"),
            "kv": r.get("kv_dtype")}


def llama(bench, model, threads, depths, kv):
    def run(*args):
        cache = ["-ctk", kv, "-ctv", kv] + (["-fa", "1"] if kv == "q8_0" else []) if kv else []
        out = subprocess.run([str(bench), "-m", model, "-t", str(threads), "-r", "1", "-o", "json",
                              *cache, *args], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    rows = run("-p", "512", "-n", "128")
    got = {"pp512": next(r["avg_ts"] for r in rows if r["n_prompt"] == 512),
           "tg128": next(r["avg_ts"] for r in rows if r["n_gen"] == 128)}
    for d in depths:
        got[f"tg128_d{d}"] = run("-p", "0", "-n", "128", "-d", str(d))[0]["avg_ts"]
    return got


def llama_simd(bin_dir):
    """The SIMD options llama.cpp was built with (its CMake cache beside the binaries)."""
    cache = Path(bin_dir).parent / "build" / "CMakeCache.txt"
    if not cache.exists():
        return "unknown"
    on = []
    for line in cache.read_text().splitlines():
        name, _, value = line.partition("=")
        name = name.split(":")[0]
        if value == "ON" and re.fullmatch(r"GGML_(AVX\w*|FMA|F16C|AMX\w*|BMI2)", name):
            on.append(name[5:].lower())
    return " ".join(sorted(on)) or "no AVX2"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--depth", default="4096",
                    help="history lengths for the decode-at-depth figures, comma-separated (0: none)")
    ap.add_argument("--kv", choices=["f32", "f16", "q8_0"],
                    help="KV cache type on both sides (default: each side's own, f16)")
    ap.add_argument("--binary", default=str(ROOT / "target/release/gemma-chat"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-profile", action="store_true",
                    help="skip sampling where each side's decode goes (needs perf)")
    ap.add_argument("--simd", choices=["avx2"],
                    help="both sides at most at this level: GEMMA_CHAT_SIMD for ours, a llama-bench "
                         "built with the flags up to it (what an AVX2-only CPU runs)")
    a = ap.parse_args()
    depths = [int(d) for d in a.depth.split(",") if int(d) > 0]
    env = dict(os.environ, **({"LLAMA_SIMD": a.simd} if a.simd else {}))
    bin_dir = subprocess.run([str(ROOT / "scripts/llama-cpp.sh")], check=True, capture_output=True,
                             text=True, env=env).stdout.strip().splitlines()[-1]
    load_before = os.getloadavg()[0]
    runs = {"gemma_chat": [], "llama_bench": []}
    model, levels = a.model, {}
    for _ in range(a.rounds):
        g = {}
        for i, d in enumerate(depths or [0]):
            r = ours(a.binary, model, a.threads, d, a.simd, a.kv)
            model = model or r["model"]
            if i == 0:
                g = {k: r[k] for k in ("pp512", "tg128")}
                levels = {"gemma_chat": r["simd"], "kv": r["kv"]}
            if d:
                g[f"tg128_d{d}"] = r["tg128_depth"]
        runs["gemma_chat"].append(g)
        runs["llama_bench"].append(llama(Path(bin_dir) / "llama-bench", model, a.threads, depths,
                                         a.kv))
    levels["llama_bench"] = llama_simd(bin_dir)
    hot = None if a.no_profile else profiles(a.binary, Path(bin_dir) / "llama-bench", model,
                                             a.threads, a.simd)
    keys = ["pp512", "tg128"] + [f"tg128_d{d}" for d in depths]
    med = {side: {k: statistics.median(r[k] for r in rs) for k in keys} for side, rs in runs.items()}
    result = {
        "model": model, "threads": a.threads, "rounds": a.rounds, "depths": depths,
        "cpu": cpu_model(), "simd": simd_level(), "simd_cap": a.simd, "simd_used": levels,
        "kernels": hot,
        "kv": a.kv or f"defaults (gemma-chat {levels.get('kv')}, llama-bench f16)",
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": os.getloadavg()[0], "runs": runs, "medians": med,
        "ratios": {k: med["gemma_chat"][k] / med["llama_bench"][k] for k in keys},
    }
    if a.json:
        print(json.dumps(result))
        return 0
    print(f"model {model}, {a.threads} threads, {a.rounds} rounds alternated, "
          f"load average {load_before:.2f} before, {result['load_avg_1m_after']:.2f} after")
    print(f"CPU: {result['cpu']}")
    print(f"CPU SIMD: {result['simd']}" + (f" (both sides capped at {a.simd})" if a.simd else ""))
    print(f"ran at: gemma-chat {levels['gemma_chat']}; llama-bench built with {levels['llama_bench']}")
    print(f"KV cache: {result['kv']}")
    for side, fns in (hot or {}).items():
        if fns:
            print(f"{side}'s decode (256 tokens) by function: "
                  + "; ".join(f"{name.removeprefix('gemma_kernels::qmatmul::')} {share:.1f}%"
                              for share, name in fns))
        else:
            print(f"{side}: no profile (perf is not installed or not allowed)")
    print(f"{'tok/s (median)':22} {'gemma-chat':>11} {'llama-bench':>12} {'ratio':>7}   all runs (ours / theirs)")
    names = {"pp512": "prefill pp512", "tg128": "decode tg128",
             **{f"tg128_d{d}": f"decode tg128 @ d{d}" for d in depths}}
    for k in keys:
        each = ", ".join(f"{g[k]:.1f}/{l[k]:.1f}" for g, l in zip(runs["gemma_chat"], runs["llama_bench"]))
        print(f"{names[k]:22} {med['gemma_chat'][k]:11.1f} {med['llama_bench'][k]:12.1f} "
              f"{result['ratios'][k]:7.2f}   {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
