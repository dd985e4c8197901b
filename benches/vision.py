"""Encoding one picture by an E2B-shaped vision tower: gemma-chat's `bench --image` against
llama.cpp's `llama-mtmd-cli` on the same mmproj GGUF, picture, budget and thread count,
alternated in one run. Prints the medians, the ratio and the load average.

    cargo build --release
    /tmp/oracle/bin/python benches/vision.py [--rounds 3] [--threads 2] [--tokens 280]
                                             [--outtype f16] [--json]

No Gemma 4 weights can be downloaded here, so the tower is E2B's shape with random weights:
transformers' `Gemma4VisionConfig` defaults (768 wide, 16 layers, 12 heads, MLP 3072, 2-D RoPE)
with clipped linears, under a two-layer text decoder of E2B's width (1536) for the projector.
Speed does not depend on the values. It is written once with transformers (torch needed, as for
the oracle fixtures) and converted by llama.cpp's own converter (the llama-cpp-python sdist) into
a text GGUF and an mmproj GGUF, cached in ~/.cache/gemma-chat/bench/. llama-mtmd-cli is built
once into the llama.cpp tree scripts/llama-cpp.sh caches. Both sides encode the same 1024 × 768 picture at `--tokens`
(llama-mtmd-cli: --image-min-tokens = --image-max-tokens); llama.cpp's figure is its own
"mtmd batch encoding done in N ms" (the tower), set beside gemma-chat's `image_encode_ms` (the
tower alone, the preprocessing reported apart).
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
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gemma-chat"


def llama_bin():
    out = subprocess.run([str(ROOT / "scripts/llama-cpp.sh")], check=True, capture_output=True,
                         text=True).stdout
    return Path(out.strip().splitlines()[-1])


def mtmd_cli():
    """llama-mtmd-cli, built once into the cached llama.cpp tree beside the other tools."""
    import shutil
    bin_dir = llama_bin()
    tool = bin_dir / "llama-mtmd-cli"
    if not tool.exists():
        cmake = shutil.which("cmake") or str(CACHE / "tools/bin/cmake")
        build = bin_dir.parent / "build"
        subprocess.run([cmake, "--build", str(build), "--target", "llama-mtmd-cli", "-j",
                        str(os.cpu_count())], check=True)
        shutil.copy(build / "bin/llama-mtmd-cli", tool)
    return tool


def make_tower(out, outtype):
    """The E2B-shaped checkpoint, its text GGUF and its mmproj GGUF (once)."""
    text, mmproj = out / "model.gguf", out / f"mmproj-{outtype}.gguf"
    if text.exists() and mmproj.exists():
        return text, mmproj
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    hf = out / "hf"
    if not (hf / "model.safetensors").exists():
        torch.manual_seed(0)
        ids = dict(boi_token_id=500, image_token_id=501, eoi_token_id=502, video_token_id=503,
                   boa_token_id=504, eoa_token_index=505, audio_token_id=506)
        cfg = Gemma4Config(
            text_config=dict(vocab_size=512, hidden_size=1536, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                             head_dim=64, global_head_dim=128, hidden_size_per_layer_input=0,
                             vocab_size_per_layer_input=512,
                             layer_types=["sliding_attention", "full_attention"],
                             max_position_embeddings=4096, tie_word_embeddings=True,
                             moe_intermediate_size=None),
            vision_config=dict(use_clipped_linears=True),
            audio_config=None, **ids)
        model = Gemma4ForConditionalGeneration(cfg).to(torch.bfloat16)
        model.save_pretrained(hf)
    src = ROOT / "tests/fixtures"
    sys.path.insert(0, str(src))
    llama_src = llama_bin().parent / "src"
    env = dict(os.environ, PYTHONPATH=f"{llama_src}:{llama_src / 'gguf-py'}")
    script = (
        "import sys, json, os\n"
        "sys.argv = ['x']\n"
        "import make_gguf_fixtures as m\n"
        "import convert_hf_to_gguf as conv\n"
        "from conversion import gemma\n"
        f"src = {str(hf)!r}\n"
        "n = json.load(open(os.path.join(src, 'config.json')))['text_config']['vocab_size']\n"
        "json.dump({'model': {'vocab': {f'<t{i}>': i for i in range(n)}}, 'added_tokens': []},"
        " open(os.path.join(src, 'tokenizer.json'), 'w'))\n"
        "json.dump({'image_mean': [0.0, 0.0, 0.0], 'image_std': [1.0, 1.0, 1.0]},"
        " open(os.path.join(src, 'preprocessor_config.json'), 'w'))\n"
        "gemma.Gemma4Model.set_vocab = m.byte_vocab\n"
        f"sys.argv = ['c', src, '--outtype', 'f32', '--outfile', {str(text)!r}]\n"
        "conv.main()\n"
        f"sys.argv = ['c', src, '--mmproj', '--outtype', {outtype!r}, '--outfile', {str(mmproj)!r}]\n"
        "conv.main()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=src,
                   stdout=subprocess.DEVNULL)
    return text, mmproj


def make_picture(path):
    if path.exists():
        return path
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (1024, 768), (30, 90, 160))
    d = ImageDraw.Draw(img)
    for i in range(40):
        d.ellipse([i * 23, i * 17, i * 23 + 200, i * 17 + 120], outline=(255, 200 - i * 4, i * 6))
    img.save(path)
    return path


def ours(text, mmproj, picture, tokens, threads):
    cmd = [str(ROOT / "target/release/gemma-chat"), "bench", "--json", "--no-sessions",
           "--prompt-tokens", "8", "--decode-tokens", "1", "--model", str(text), "--mmproj",
           str(mmproj), "--image", str(picture), "--image-tokens", str(tokens)]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                    env=env).stdout)
    return out["image_encode_ms"], out["image_tokens"]


def theirs(binary, text, mmproj, picture, tokens, threads):
    cmd = [str(binary), "-m", str(text), "--mmproj", str(mmproj), "--image", str(picture),
           "-p", "x", "-n", "1", "-t", str(threads), "--image-min-tokens", str(tokens),
           "--image-max-tokens", str(tokens), "--temp", "0", "--chat-template", "gemma"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    said = out.stdout + out.stderr
    m = re.search(r"(?:image slice encoded|batch encoding done) in (\d+) ms", said)
    if not m:
        sys.exit(f"llama-mtmd-cli said no encode time:\n{said[-2000:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=280)
    ap.add_argument("--outtype", default="f16")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = CACHE / "bench" / "e2b-tower"
    out.mkdir(parents=True, exist_ok=True)
    text, mmproj = make_tower(out, a.outtype)
    picture = make_picture(out / "picture.png")
    mtmd = mtmd_cli()
    ours_ms, theirs_ms = [], []
    for _ in range(a.rounds):
        ms, our_tokens = ours(text, mmproj, picture, a.tokens, a.threads)
        ours_ms.append(ms)
        theirs_ms.append(theirs(mtmd, text, mmproj, picture, a.tokens, a.threads))
    load = open("/proc/loadavg").read().split()[0]
    r = {
        "tower": "E2B-shaped (768 wide, 16 layers, clipped), random weights",
        "mmproj_type": a.outtype, "budget": a.tokens, "threads": a.threads, "load_avg_1m": load,
        "gemma_chat_tokens": our_tokens,
        "gemma_chat_encode_ms": statistics.median(ours_ms),
        "llama_mtmd_cli_encode_ms": statistics.median(theirs_ms),
    }
    r["speed_ratio"] = r["llama_mtmd_cli_encode_ms"] / r["gemma_chat_encode_ms"]
    if a.json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print(f"{k:26} {v}")


if __name__ == "__main__":
    main()
