"""`gemma-chat serve` through HTTP against `gemma-chat bench` and llama-server on the same file:
one client's time to first token (a prompt of about 800 tokens, as prompt tokens per second
against bench's prefill of a prompt as long) and decode speed, then the throughput of
four clients at once (gemma-chat with 4 slots, llama-server with -np 4), each side alternated.

    cargo build --release
    python3 benches/serve.py [--model PATH] [--threads 2] [--rounds 2]

llama-server is built by scripts/llama-cpp.sh (cached outside the repository). Greedy answers of
128 tokens; an answer that ends early counts the tokens it had.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = ("The history of the printing press begins in the fifteenth century. " * 64).strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"the server exited: {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.2)
    sys.exit("the server did not come up")


def stream(port, prompt, n, extra=None):
    """One streamed greedy answer: (seconds to the first token, decode tok/s, tokens, prompt
    tokens)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            **(extra or {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    first = last = None
    tokens = prompt_tokens = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
                prompt_tokens = ev["usage"]["prompt_tokens"]
            if ev.get("choices") and ev["choices"][0]["delta"].get("content"):
                now = time.time()
                first = first or now
                last = now
    ttft = (first or time.time()) - t0
    decode = (tokens - 1) / (last - first) if first and last and last > first else 0.0
    return ttft, decode, tokens, prompt_tokens


def four(port, n, tag):
    """Four different prompts at once: total completion tokens per second of wall time."""
    results = [None] * 4
    def run(i):
        results[i] = stream(port, f"{tag} {i}: {PROMPT[:200]}", n)
    t0 = time.time()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r[2] for r in results) / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    binary = str(ROOT / "target/release/gemma-chat")
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads))
    model = a.model
    if not model:
        out = subprocess.run([binary, "bench", "--json", "--no-sessions", "--prompt-tokens", "16",
                              "--decode-tokens", "4"], capture_output=True, text=True, env=env,
                             check=True)
        model = json.loads(out.stdout.strip().splitlines()[-1])["model"]
    bin_dir = subprocess.run([str(ROOT / "scripts/llama-cpp.sh")], check=True, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
    rows = {"bench": [], "serve": [], "serve4": [], "llama4": []}
    load = os.getloadavg()[0]
    for r in range(a.rounds):
        port = free_port()
        p = subprocess.Popen([binary, "serve", "--port", str(port), "--slots", "4", "--parallel", "4", "--model", model],
                             env=env, stderr=subprocess.DEVNULL)
        try:
            wait_health(port, p)
            ttft, dec, _, n = stream(port, f"round {r}: " + PROMPT, 128)
            rows["serve"].append((n / ttft, dec))
            rows["serve4"].append(four(port, 128, f"round {r}"))
        finally:
            p.terminate()
            p.wait()
        # bench on a prompt of the same length: its prefill is the first token's time there.
        out = subprocess.run([binary, "bench", "--json", "--no-sessions", "--prompt-tokens", str(n),
                              "--decode-tokens", "128", "--model", model],
                             capture_output=True, text=True, env=env, check=True)
        b = json.loads(out.stdout.strip().splitlines()[-1])
        rows["bench"].append((b["prefill_tok_s"], b["decode_tok_s"]))
        port = free_port()
        p = subprocess.Popen([str(Path(bin_dir) / "llama-server"), "-m", model, "-t", str(a.threads),
                              "--port", str(port), "-np", "4", "-c", "8192", "--host", "127.0.0.1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_health(port, p)
            rows["llama4"].append(four(port, 128, f"round {r}"))
        finally:
            p.terminate()
            p.wait()
    med = lambda xs: statistics.median(xs)
    print(f"model {model}, {a.threads} threads, {a.rounds} rounds, load average {load:.2f} "
          f"before, {os.getloadavg()[0]:.2f} after")
    bt, bd = med([x[0] for x in rows["bench"]]), med([x[1] for x in rows["bench"]])
    st, sd = med([x[0] for x in rows["serve"]]), med([x[1] for x in rows["serve"]])
    print(f"one client: prompt tokens per second of time to first token {st:.0f} through the "
          f"server (HTTP, template, prefill), {bt:.0f} prefill in bench ({st / bt:.2f}x); decode "
          f"{sd:.1f} tok/s vs {bd:.1f} ({sd / bd:.2f}x); the client runs on the same cores")
    s4, l4 = med(rows["serve4"]), med(rows["llama4"])
    print(f"four clients: {s4:.1f} tok/s total through gemma-chat serve (4 slots), {l4:.1f} "
          f"through llama-server -np 4 ({s4 / l4:.2f}x)")
    print(json.dumps(rows))


if __name__ == "__main__":
    sys.exit(main())
