#!/usr/bin/env bash
# OpenAiLlm against a server nobody here wrote: llama.cpp's `llama-server`, built from the
# source bundled in the llama-cpp-python 0.3.16 sdist (as benches/gguf-side-by-side.sh builds
# llama-bench; needs cmake, e.g. `pip install cmake`), serving the real test GGUF on loopback.
# Runs tests/openai_llm_remote.rs against it and stops the server.
#
#   scripts/llama-server-check.sh [model.gguf]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$("$repo/scripts/fetch-test-models.sh")}
cache=${HEARTH_CACHE:-$HOME/.cache/hearth}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}
src=$cache/llama.cpp
server=$src/build/bin/llama-server

if [ ! -f "$src/CMakeLists.txt" ]; then
  tmp=$(mktemp -d)
  python3 - "$tmp/sdist.tar.gz" <<'PY'
import hashlib, re, sys, urllib.request
html = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
url = re.search(r'href="([^"]*llama_cpp_python-0\.3\.16\.tar\.gz)#sha256=([0-9a-f]+)', html)
data = urllib.request.urlopen(url.group(1)).read()
if hashlib.sha256(data).hexdigest() != url.group(2):
    sys.exit("sha256 mismatch for the llama-cpp-python sdist")
open(sys.argv[1], "wb").write(data)
PY
  mkdir -p "$src"
  tar xzf "$tmp/sdist.tar.gz" -C "$tmp"
  cp -r "$tmp"/llama_cpp_python-0.3.16/vendor/llama.cpp/. "$src/"
fi
if [ ! -x "$server" ]; then
  (cd "$src" && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF >&2 \
     && cmake --build build -j"${JOBS:-2}" --target llama-server >&2)
fi

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
