#!/usr/bin/env bash
# Builds llama.cpp's own tools (llama-quantize, llama-bench, llama-server, ggml-rpc-server) from the
# llama.cpp tree vendored in the llama-cpp-python sdist on PyPI, once, into a cache outside the
# repository; prints the directory holding the binaries. The peer for benchmarks, the quantizer for
# test fixtures, and the server (with RPC workers) the remote engine's tests drive.
#
#   scripts/llama-cpp.sh            # → ~/.cache/gemma-chat/llama.cpp-0.3.36/bin
#
# Built with -DGGML_NATIVE=OFF and the SIMD flags /proc/cpuinfo lists: a native build dies with
# SIGILL on hosts that report AMX. GEMMA_CHAT_PEERS moves the cache. LLAMA_SIMD=avx2 builds (into
# a directory of its own) the peer an AVX2-only CPU runs: the flags up to AVX2, FMA and F16C.
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
CACHE="${GEMMA_CHAT_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/gemma-chat}"
SIMD="${LLAMA_SIMD:-native}"
case "$SIMD" in
  native) DIR="$CACHE/llama.cpp-$VERSION" ;;
  avx2) DIR="$CACHE/llama.cpp-$VERSION-avx2" ;;
  *) echo "LLAMA_SIMD must be avx2 (or unset)" >&2; exit 2 ;;
esac
BIN="$DIR/bin"
TOOLS=(llama-quantize llama-bench llama-server ggml-rpc-server)
# Prints the directory and ends the script when every tool is built.
done_if_built() {
  for t in "${TOOLS[@]}"; do [ -x "$BIN/$t" ] || return 0; done
  echo "$BIN"
  exit 0
}
done_if_built
mkdir -p "$DIR"
# One builder at a time: test binaries, and tests within one, may ask together, and two cmake
# builds in one build folder break each other. The later ones wait here, then find the tools.
exec 9>"$CACHE/llama.cpp-$VERSION.lock"
flock 9
done_if_built
SDIST="$CACHE/llama_cpp_python-$VERSION.tar.gz"
if ! echo "$SHA256  $SDIST" | sha256sum -c --status 2>/dev/null; then
  echo "== fetching llama-cpp-python $VERSION (sdist) through pip" >&2
  # pip's own index and mirrors; --no-binary for this package alone makes it the sdist (its
  # metadata hook runs with wheels of its build requirements; nothing is compiled).
  rm -rf "$SDIST.dl" && mkdir -p "$SDIST.dl"
  python3 -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python -d "$SDIST.dl" "llama-cpp-python==$VERSION" >&2
  got="$SDIST.dl/$(basename "$SDIST")"
  echo "$SHA256  $got" | sha256sum -c --status || { echo "checksum mismatch: $got" >&2; exit 1; }
  mv "$got" "$SDIST" && rm -rf "$SDIST.dl"
fi
SRC="$CACHE/llama.cpp-$VERSION/src"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  rm -rf "$SRC" && mkdir -p "$SRC"
  tar xzf "$SDIST" -C "$SRC" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
CMAKE=cmake
if ! command -v cmake >/dev/null 2>&1; then
  # cmake from PyPI, in a venv of its own in the cache.
  [ -x "$CACHE/tools/bin/cmake" ] || {
    python3 -m venv "$CACHE/tools" && "$CACHE/tools/bin/pip" install -q cmake >&2
  }
  CMAKE="$CACHE/tools/bin/cmake"
fi
flags=()
cpu=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $cpu " == *" $1 "* ]]; }
has avx2 && flags+=(-DGGML_AVX2=ON)
has fma && flags+=(-DGGML_FMA=ON)
has f16c && flags+=(-DGGML_F16C=ON)
if [ "$SIMD" = native ]; then
  has avx512f && flags+=(-DGGML_AVX512=ON)
  has avx512_vnni && flags+=(-DGGML_AVX512_VNNI=ON)
  has avx512_bf16 && flags+=(-DGGML_AVX512_BF16=ON)
  has avx512vbmi && flags+=(-DGGML_AVX512_VBMI=ON)
  has avx_vnni && flags+=(-DGGML_AVX_VNNI=ON)
fi
echo "== building llama.cpp $VERSION: ${flags[*]}" >&2
"$CMAKE" -S "$SRC" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF "${flags[@]}" \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_RPC=ON \
  -DBUILD_SHARED_LIBS=OFF >&2
"$CMAKE" --build "$DIR/build" -j "$(nproc)" --target "${TOOLS[@]}" >&2
mkdir -p "$BIN"
for t in "${TOOLS[@]}"; do cp "$DIR/build/bin/$t" "$BIN/"; done
echo "$BIN"
