#!/usr/bin/env bash
# Mixture-of-experts speed, Hearth beside llama.cpp: a Qwen3-30B-A3B-shaped GGUF of random
# weights (the real hidden size, heads, expert size and top-8; fewer layers, benches/moe_gguf.py),
# quantized Q4_K_M by llama.cpp's own llama-quantize, then benches/gguf-side-by-side.sh on it
# (pp32, pp512, tg64; peak RSS beside the file size). Files are made once, in the cache.
#
#   benches/moe-side-by-side.sh [--cpu avx2] [--layers N] [--experts N] [threads]
#
# Needs python3 with venv, cmake (`pip install cmake`) and the real test GGUF, whose tokenizer
# the random file takes (scripts/fetch-test-models.sh).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${HEARTH_CACHE:-$HOME/.cache/hearth}
cpu=()
layers=4
experts=128
while true; do
  case "${1:-}" in
    --cpu) cpu=(--cpu "$2"); shift 2 ;;
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
dir=$cache/models/moe-bench
mkdir -p "$dir"
name=qwen3-30b-a3b-shaped-l${layers}-e${experts}
f16=$dir/$name-f16.gguf
q4=$dir/$name-q4_k_m.gguf
if [ ! -f "$q4" ]; then
  PYTHONPATH=$src/gguf-py "$venv/bin/python" "$repo/benches/moe_gguf.py" \
    --tokenizer-from "$("$repo/scripts/fetch-test-models.sh")" --layers "$layers" --experts "$experts" "$f16"
  "$bin/llama-quantize" "$f16" "$q4.part" Q4_K_M "$threads" >&2
  mv "$q4.part" "$q4"
  rm -f "$f16"
fi
exec "$repo/benches/gguf-side-by-side.sh" "${cpu[@]}" --label moe "$threads" "$q4"
