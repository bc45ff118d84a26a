#!/usr/bin/env bash
# Qwen3.5 speed, Hearth beside llama.cpp: a Qwen3.5-9B- or Qwen3.5-35B-A3B-shaped GGUF of random
# weights (the real widths, heads, linear-attention heads and expert sizes; fewer layers, three
# Gated DeltaNet to one full attention; benches/hybrid_gguf.py), quantized Q4_K_M by llama.cpp's
# own llama-quantize, then benches/gguf-side-by-side.sh on it (pp32, pp512, tg64; peak RSS beside
# the file size). Files are made once, in the cache.
#
#   benches/hybrid-side-by-side.sh [--cpu avx2] [--shape 9b|35b-a3b] [--layers N] [--experts N] [threads]
#
# Needs python3 with venv and cmake (`pip install cmake`); the vocabulary comes from
# scripts/fetch-llama-vocab.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${HEARTH_CACHE:-$HOME/.cache/hearth}
cpu=()
shape=9b
layers=4
experts=
while true; do
  case "${1:-}" in
    --cpu) cpu=(--cpu "$2"); shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --experts) experts=$2; shift 2 ;;
    *) break ;;
  esac
done
threads=${1:-2}
bin=$("$repo/scripts/llama-cpp.sh" llama-quantize)
src=$(dirname "$(dirname "$bin")")
venv=$cache/venv-gguf
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv" && "$venv/bin/pip" -q install numpy pyyaml; }
vocab=$("$repo/scripts/fetch-llama-vocab.sh")/ggml-vocab-qwen35.gguf
dir=$cache/models/hybrid-bench
mkdir -p "$dir"
name=qwen3.5-$shape-shaped-l$layers${experts:+-e$experts}
f16=$dir/$name-f16.gguf
q4=$dir/$name-q4_k_m.gguf
if [ ! -f "$q4" ]; then
  PYTHONPATH=$src/gguf-py "$venv/bin/python" "$repo/benches/hybrid_gguf.py" --shape "$shape" \
    --layers "$layers" ${experts:+--experts "$experts"} --vocab-from "$vocab" \
    --template "$repo/crates/engine/tests/fixtures/templates/Qwen3.5-4B.jinja" "$f16"
  "$bin/llama-quantize" "$f16" "$q4.part" Q4_K_M "$threads" >&2
  mv "$q4.part" "$q4"
  rm -f "$f16"
fi
exec "$repo/benches/gguf-side-by-side.sh" "${cpu[@]}" --label "hybrid-$shape" "$threads" "$q4"
