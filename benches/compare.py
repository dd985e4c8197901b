"""gemma-chat against llama.cpp on the same GGUF, prompt, thread count and token counts, in one
run: prefill tok/s of a 512-token prompt and decode tok/s over 128 tokens, with the ratios.

    pip install llama-cpp-python   # builds llama.cpp from source (needs cmake; about 4 min)
    cargo build --release
    python benches/compare.py [--model PATH] [--threads 2] [--json]

Without --model, gemma-chat's demo model is used (the path its `bench` reports). Each side runs
greedy, ignores stop tokens and is timed around the model calls only.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# The same text `gemma-chat bench` uses (src/cli/bench.rs).
TEXT = (
    "The history of the lighthouse begins with fires lit on hills to guide ships home. Over the "
    "centuries these became towers of stone, then of iron, with lenses that gathered the light "
    "of a single flame into a beam seen thirty miles out at sea. Keepers lived in small houses at "
    "their feet, trimming wicks, winding clockwork and logging the weather through long nights. "
)


def ours(binary, model, threads, prompt_tokens, decode_tokens):
    cmd = [binary, "bench", "--json", "--prompt-tokens", str(prompt_tokens),
           "--decode-tokens", str(decode_tokens)]
    if model:
        cmd += ["--model", model]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def llama_cpp(model, threads, prompt_tokens, decode_tokens):
    import numpy as np
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(model_path=model, n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                n_batch=prompt_tokens, verbose=False)
    load_s = time.perf_counter() - t0
    ids = []
    while len(ids) < prompt_tokens:
        ids += llm.tokenize(TEXT.encode(), add_bos=not ids, special=False)
    ids = ids[:prompt_tokens]
    llm.reset()
    t = time.perf_counter()
    llm.eval(ids)
    prefill_s = time.perf_counter() - t
    vocab = llm.n_vocab()

    def last_logits():
        # The context's own buffer: llama-cpp-python's `scores` holds only n_batch rows.
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    nxt = int(np.argmax(last_logits()))
    t = time.perf_counter()
    for _ in range(decode_tokens):
        llm.eval([nxt])
        nxt = int(np.argmax(last_logits()))
    decode_s = time.perf_counter() - t
    return {
        "load_s": load_s,
        "prefill_tok_s": prompt_tokens / prefill_s,
        "decode_tok_s": decode_tokens / decode_s,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parent.parent
                                            / "target/release/gemma-chat"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load_avg = os.getloadavg()[0]
    g = ours(a.binary, a.model, a.threads, a.prompt_tokens, a.decode_tokens)
    model = a.model or g["model"]
    l = llama_cpp(model, a.threads, a.prompt_tokens, a.decode_tokens)
    result = {
        "model": model,
        "threads": a.threads,
        "load_avg_1m_before": load_avg,
        "gemma_chat": g,
        "llama_cpp": l,
        "prefill_ratio": g["prefill_tok_s"] / l["prefill_tok_s"],
        "decode_ratio": g["decode_tok_s"] / l["decode_tok_s"],
    }
    if a.json:
        print(json.dumps(result))
        return
    print(f"model {model}, {a.threads} threads, load average {load_avg:.2f} before the run")
    print(f"{'':10} {'gemma-chat':>12} {'llama.cpp':>12} {'ratio':>8}")
    for k, name in [("prefill_tok_s", "prefill"), ("decode_tok_s", "decode")]:
        print(f"{name:10} {g[k]:12.1f} {l[k]:12.1f} {g[k] / l[k]:8.2f}")
    print(f"gemma-chat ttft cold {g['ttft_cold_ms']:.0f} ms ({g['history_tokens']} tokens), "
          f"warm {g['ttft_warm_ms']:.0f} ms (empty history {g['ttft_warm_empty_ms']:.0f} ms)")


if __name__ == "__main__":
    sys.exit(main())
