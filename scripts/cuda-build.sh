#!/usr/bin/env bash
# Builds `hearth` with `--features cuda` on a machine without a GPU or CUDA toolkit (CUDA 13's
# compiler from PyPI, kernels for CUDA_COMPUTE_CAP, default 90 = H100/H200), then checks that
# the binary starts: against the driver stub it runs on the CPU and reports `--device cuda`
# clearly. The binary is at $CUDA_TARGET_DIR/release/hearth (default ~/.cache/hearth-target-cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/cuda-toolchain.sh)"
export CARGO_TARGET_DIR="${CUDA_TARGET_DIR:-$HOME/.cache/hearth-target-cuda}"
cargo build --release --features cuda
bin="$CARGO_TARGET_DIR/release/hearth"

run() { LD_LIBRARY_PATH="$HEARTH_CUDA_RUNTIME_PATH" "$bin" "$@"; }
model=crates/engine/tests/fixtures/tiny-qwen2
run run --model "$model" --device cpu --max-tokens 4 --temperature 0 "Hello" >/dev/null
err=$(mktemp)
trap 'rm -f "$err"' EXIT
if run run --model "$model" --device cuda --max-tokens 4 "Hello" >/dev/null 2>"$err"; then
  echo "cuda-build: --device cuda succeeded against the stub driver?" >&2
  exit 1
fi
grep -q "cannot open cuda:0" "$err" || { echo "cuda-build: unclear error for --device cuda:" >&2; cat "$err" >&2; exit 1; }
run run --model "$model" --device auto --max-tokens 4 --temperature 0 "Hello" >/dev/null
echo "cuda-build: $bin built; runs on the CPU; --device cuda without a driver: $(grep -o 'cannot open cuda:0.*' "$err" | head -c 120)"
