#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (about 8 minutes once the crates are fetched):
# builds with `--features cuda`, runs the GPU tests on CUDA (every oracle fixture's logits
# against the CPU's, every quantized fixture kept in its blocks on the device within its bound,
# the demo model's device bytes), then benchmarks the demo model (or $GEMMA_CHAT_MODEL) with its
# quantized weights dequantized to bf16 and kept in their blocks: pp512, tg128, weight and KV
# bytes from `bench --json`, and the GPU's peak memory from nvidia-smi.
#
#   scripts/gpu-check.sh                 # CUDA
#   BACKEND=wgpu scripts/gpu-check.sh    # the same on wgpu (Vulkan on the GPU)
#   GEMMA_CHAT_MODEL=model.gguf scripts/gpu-check.sh   # benchmark another GGUF
#   PREBUILT=dir BACKEND=wgpu scripts/gpu-check.sh      # no toolchain there: dir holds the
#       `gemma-chat` and `gpu_backend` test binaries built elsewhere with the backend's feature
#       (the test binary finds the fixtures where it was built: link the checkout there)
#
# burn's CUDA runtime emits PTX through LLVM 23.1 (`cubecl-llvm`), whose build script downloads a
# bundle into ~/.local/share/tracel/ (see the README's Backends section): a machine without
# internet needs it copied there first, or BACKEND=wgpu. Results go to stdout and to
# ${OUT:-target/gpu-check}/.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND="${BACKEND:-cuda}"
OUT_DIR="${OUT:-target/gpu-check}"
mkdir -p "$OUT_DIR"
say() { printf '== %s\n' "$*"; }

[ -n "${PREBUILT:-}" ] || command -v cargo >/dev/null || { echo "cargo is not installed: https://rustup.rs" >&2; exit 2; }
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
else
  echo "nvidia-smi not found: no NVIDIA driver on this machine" >&2
  [ "$BACKEND" = cuda ] && exit 2
fi
if [ "$BACKEND" = cuda ] && [ -z "${PREBUILT:-}" ] && ! ls -d "$HOME"/.local/share/tracel/tracel-llvm-* >/dev/null 2>&1; then
  echo "note: no LLVM bundle in ~/.local/share/tracel: the cuda build downloads it now" \
    "(offline: copy it there, or run BACKEND=wgpu $0)" >&2
fi

if [ -n "${PREBUILT:-}" ]; then
  say "prebuilt binaries in $PREBUILT"
  GEMMA_CHAT="$PREBUILT/gemma-chat"
  tests() { "$PREBUILT/gpu_backend" "$@"; }
else
  say "build ($BACKEND)"
  time cargo build --release --features "$BACKEND" 2>&1 | tail -3
  GEMMA_CHAT="${CARGO_TARGET_DIR:-target}/release/gemma-chat"
  tests() { cargo test --release --features "$BACKEND" --test gpu_backend -- "$@"; }
fi

say "tests on $BACKEND: oracle fixtures, quantized fixtures in their blocks, the demo model"
GEMMA_CHAT_TEST_BACKEND="$BACKEND" tests --nocapture --test-threads 1 2>&1 |
  tee "$OUT_DIR/tests.log" |
  grep -E '^(test |demo|  *[a-z0-9]+ +[A-Z0-9_]+ +max)|test result|panicked' || true
# The script goes on to the benchmarks either way, and exits non-zero at the end on a failure.
status=0
grep -q '^test result: ok' "$OUT_DIR/tests.log" || status=1

# Runs `cmd` with its stdout into `file`, sampling the GPU's memory in use meanwhile; prints the
# peak in MiB.
peak_while() {
  local file=$1 log="$OUT_DIR/mem.$$"
  shift
  local smi=""
  : >"$log"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$log" 2>/dev/null &
    smi=$!
  fi
  "$@" >"$file"
  [ -n "$smi" ] && kill "$smi" 2>/dev/null || true
  sort -n "$log" | tail -1
  rm -f "$log"
}

say "bench: bf16 against quantized weights (pp512, tg128, device bytes)"
# A bench that fails (its error is on stderr above) gives a line saying so, not a traceback.
: >"$OUT_DIR/bench.txt"
for w in bf16 quantized; do
  json="$OUT_DIR/bench-$w.json"
  peak=$(peak_while "$json" "$GEMMA_CHAT" bench --backend "$BACKEND" \
    --gpu-weights "$w" --prompt-tokens 512 --decode-tokens 128 --no-sessions --json)
  python3 - "$json" "$w" "${peak:-?}" <<'EOF' | tee -a "$OUT_DIR/bench.txt" || status=1
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except ValueError:
    print(f"{sys.argv[2]:9} bench failed: no result (its error is above)")
    sys.exit(1)
print(f"{sys.argv[2]:9} pp512 {j['prefill_tok_s']:8.1f} tok/s  tg128 {j['decode_tok_s']:7.1f} tok/s  "
      f"weights on the device {j['device_weights_mb']:8.1f} MiB ({j['device_quantized_matrices']} in blocks)  "
      f"KV {j['kv_bytes'] / 2**20:6.1f} MiB  GPU peak {sys.argv[3]} MiB  ({j['dtype']}, load {j['load_s']:.1f} s)")
EOF
done
exit "$status"
