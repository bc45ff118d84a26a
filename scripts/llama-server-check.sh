#!/usr/bin/env bash
# OpenAiLlm against a server nobody here wrote: llama.cpp's `llama-server` (built by
# scripts/llama-cpp.sh; needs cmake, e.g. `pip install cmake`), serving the real test GGUF on
# loopback.
# Runs tests/openai_llm_remote.rs against it and stops the server.
#
#   scripts/llama-server-check.sh [model.gguf]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$("$repo/scripts/fetch-test-models.sh")}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}
server=$("$repo/scripts/llama-cpp.sh" llama-server)/llama-server

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server" -m "$model" --host 127.0.0.1 --port "$port" --jinja -c 4096 -t 2 --log-disable >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 1
done
cd "$repo"
HEARTH_OPENAI_URL="http://127.0.0.1:$port/v1" cargo test --test openai_llm_remote -- --ignored --nocapture
