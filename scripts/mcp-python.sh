#!/usr/bin/env bash
# Makes, once, a Python virtual environment with the official MCP SDK (PyPI `mcp`) in a cache
# outside the repository, and prints its interpreter: the tests run real MCP servers written
# with its MCPServer (tests/fixtures/mcp/*.py) over stdio and streamable HTTP.
#
#   scripts/mcp-python.sh        # → ~/.cache/gemma-chat/mcp-2.3.0/bin/python
#
# GEMMA_CHAT_PEERS moves the cache (as for scripts/llama-cpp.sh).
set -euo pipefail
VERSION=2.3.0
CACHE="${GEMMA_CHAT_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/gemma-chat}"
DIR="$CACHE/mcp-$VERSION"
PY="$DIR/bin/python"
if [ -x "$PY" ] && "$PY" -c "import mcp.server.mcpserver" 2>/dev/null; then
  echo "$PY"
  exit 0
fi
mkdir -p "$CACHE"
# One builder at a time: concurrent test processes may ask together.
exec 9>"$CACHE/mcp-$VERSION.lock"
flock 9
if ! { [ -x "$PY" ] && "$PY" -c "import mcp.server.mcpserver" 2>/dev/null; }; then
  echo "== making $DIR (PyPI mcp $VERSION)" >&2
  rm -rf "$DIR"
  if python3 -m venv "$DIR" >&2 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check "mcp==$VERSION" >&2
  else
    # No venv module (Debian's python3 without python3-venv): the packages in a folder of their
    # own and an interpreter wrapper that puts them on the path.
    rm -rf "$DIR"
    python3 -m pip install -q --disable-pip-version-check --target "$DIR/site" "mcp==$VERSION" >&2
    mkdir -p "$DIR/bin"
    printf '#!/bin/sh\nPYTHONPATH="%s/site${PYTHONPATH:+:$PYTHONPATH}" exec python3 "$@"\n' "$DIR" >"$PY"
    chmod +x "$PY"
  fi
fi
echo "$PY"
