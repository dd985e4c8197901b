"""Peak memory of gemma-chat against llama.cpp's llama-bench on the same GGUF files: the demo
model and requantized copies of it (Q4_0, Q5_K_M, IQ4_XS, BF16), made once with llama.cpp's own
llama-quantize and cached. Each side loads the file, prefills 512 tokens and decodes 128 with 2
threads; peak RSS is the child's ru_maxrss (mapped weight pages count, as they are resident).
A long-context row follows for the first file: a history of `--depth` tokens (16,384 by default)
prefilled, then 16 decoded, where the KV cache, not the weights, is the memory; both sides keep
it in `--kv` (f16 by default, llama.cpp's default), and that row must stay at or under
`--depth-bound` (1.0: no more than llama.cpp).

    cargo build --release
    python3 benches/memory.py [--types Q4_K_M,Q4_0,Q5_K_M,IQ4_XS,BF16] [--depth 16384]
                              [--kv f16|q8_0|f32] [--json]

llama.cpp is built by scripts/llama-cpp.sh (from the llama-cpp-python sdist, cached outside the
repository). Prints one row per file and the ratio ours / llama-bench; exits non-zero when a
ratio is above --bound (default 1.1).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def peak_of(cmd, env=None):
    """Runs `cmd` in a fresh child of a fresh Python, so that ru_maxrss is that child's alone."""
    probe = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "if p.returncode: sys.stderr.write(p.stderr.decode()[-2000:]); sys.exit(p.returncode)\n"
        "sys.stdout.write(p.stdout.decode()[-4000:] + '\\n')\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *cmd], check=True, capture_output=True,
                         text=True, env=env)
    lines = out.stdout.strip().splitlines()
    return int(lines[-1]) / 1024, "\n".join(lines[:-1])


def demo_model(binary):
    data = os.environ.get("GEMMA_CHAT_DATA_DIR") or str(Path.home() / ".local/share/gemma-chat")
    return Path(data) / "models" / "gemma-3-270m-q4_k_m.gguf"


def requantized(quantize, source, ty, cache):
    if ty == "Q4_K_M":
        return source
    out = cache / f"gemma-3-270m-{ty.lower()}.gguf"
    if not out.exists():
        tmp = out.with_suffix(".part")
        subprocess.run([quantize, "--allow-requantize", str(source), str(tmp), ty], check=True,
                       capture_output=True)
        tmp.rename(out)
    return out


def long_row(a, bin_dir, f, env):
    """Peak RSS after a history of `a.depth` tokens and 16 decoded, the KV cache in `a.kv`."""
    ours, text = peak_of([a.binary, "bench", "--json", "--no-sessions", "--model", str(f),
                          "--prompt-tokens", "16", "--decode-tokens", "16", "--depth",
                          str(a.depth), "--kv-dtype", a.kv], env)
    bench = json.loads(text.strip().splitlines()[-1])
    cache = ["-ctk", a.kv, "-ctv", a.kv] + (["-fa", "1"] if a.kv == "q8_0" else [])
    theirs, _ = peak_of([str(bin_dir / "llama-bench"), "-m", str(f), "-t", str(a.threads),
                         "-p", "0", "-n", "16", "-d", str(a.depth), "-r", "1", *cache])
    return {"type": f"{f.stem.split('-')[-1].upper()} @ d{a.depth} kv {a.kv}",
            "file_mb": f.stat().st_size / 2**20, "ours_peak_mb": ours,
            "llama_bench_peak_mb": theirs, "ratio": ours / theirs,
            "weights_mapped_mb": bench["weights_mapped_mb"],
            "weights_owned_mb": bench["weights_owned_mb"],
            "weights_mb_by_type": bench["weights_mb_by_type"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="Q4_K_M,Q4_0,Q5_K_M,IQ4_XS,BF16")
    ap.add_argument("--binary", default=str(ROOT / "target/release/gemma-chat"))
    ap.add_argument("--model", help="source GGUF (default: the demo model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bound", type=float, default=1.1)
    ap.add_argument("--depth", type=int, default=16384, help="the long-context row's history (0: none)")
    ap.add_argument("--kv", choices=["f32", "f16", "q8_0"], default="f16")
    ap.add_argument("--depth-bound", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    bin_dir = Path(subprocess.run([str(ROOT / "scripts/llama-cpp.sh")], check=True,
                                  capture_output=True, text=True).stdout.strip().splitlines()[-1])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gemma-chat/requant"
    cache.mkdir(parents=True, exist_ok=True)
    source = Path(a.model) if a.model else demo_model(a.binary)
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads))
    rows, worst = [], 0.0
    for ty in a.types.split(","):
        f = requantized(bin_dir / "llama-quantize", source, ty, cache)
        ours, text = peak_of([a.binary, "bench", "--json", "--no-sessions", "--model", str(f),
                              "--prompt-tokens", "512", "--decode-tokens", "128"], env)
        bench = json.loads(text.strip().splitlines()[-1])
        theirs, _ = peak_of([str(bin_dir / "llama-bench"), "-m", str(f), "-t", str(a.threads),
                             "-p", "512", "-n", "128", "-r", "1"])
        ratio = ours / theirs
        worst = max(worst, ratio)
        rows.append({"type": ty, "file_mb": f.stat().st_size / 2**20, "ours_peak_mb": ours,
                     "llama_bench_peak_mb": theirs, "ratio": ratio,
                     "weights_mapped_mb": bench["weights_mapped_mb"],
                     "weights_owned_mb": bench["weights_owned_mb"],
                     "weights_mb_by_type": bench["weights_mb_by_type"]})
    if a.depth:
        rows.append(long_row(a, bin_dir, requantized(bin_dir / "llama-quantize", source,
                                                     a.types.split(",")[0], cache), env))
        long_ok = rows[-1]["ratio"] <= a.depth_bound
    else:
        long_ok = True
    load = open("/proc/loadavg").read().split()[0]
    if a.json:
        print(json.dumps({"load_avg_1m": load, "rows": rows}))
    else:
        print(f"peak RSS, load + 512-token prefill + 128 decoded, {a.threads} threads (load {load})")
        print(f"{'file':24} {'size MB':>8} {'ours MB':>8} {'llama MB':>9} {'ratio':>6}  mapped/owned MB")
        for r in rows:
            print(f"{r['type']:24} {r['file_mb']:8.0f} {r['ours_peak_mb']:8.0f} "
                  f"{r['llama_bench_peak_mb']:9.0f} {r['ratio']:6.2f}  "
                  f"{r['weights_mapped_mb']:.0f}/{r['weights_owned_mb']:.1f}")
    return 0 if worst <= a.bound and long_ok else 1


if __name__ == "__main__":
    sys.exit(main())
