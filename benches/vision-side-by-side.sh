#!/usr/bin/env bash
# The vision tower side by side: Hearth's tower (`cargo bench -p hearth-engine --bench vision`)
# and llama.cpp's `llama-mtmd-cli` on one mmproj GGUF, per image, the same threads. llama.cpp
# loads a text model with the projector (a GGUF of the same width); its "image slice encoded"
# time is the tower's, as Hearth's "encode" is. llama.cpp comes from scripts/llama-cpp.sh.
#
#   benches/vision-side-by-side.sh THREADS MMPROJ.gguf TEXT.gguf IMAGE... [--runs N]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 4 ] || { echo "usage: $0 THREADS MMPROJ.gguf TEXT.gguf IMAGE... [--runs N]" >&2; exit 2; }
threads=$1; mmproj=$(realpath "$2"); text=$(realpath "$3"); shift 3
runs=1; images=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    *) images+=("$(realpath "$1")"); shift ;;
  esac
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}
llama=$("$repo/scripts/llama-cpp.sh" llama-mtmd-cli)/llama-mtmd-cli
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(grep -o -w -E 'avx512f|avx2|amx_tile' /proc/cpuinfo | sort -u | xargs); $threads threads"
echo "# Hearth"
(cd "$repo" && RAYON_NUM_THREADS=$threads cargo bench -q -p hearth-engine --bench vision -- "$mmproj" "${images[@]}" --runs "$runs")
echo "# llama.cpp ($llama)"
for image in "${images[@]}"; do
  for _ in $(seq "$runs"); do
    "$llama" -m "$text" --mmproj "$mmproj" --image "$image" -p "Describe the image." -n 1 \
      -t "$threads" --temp 0 --no-warmup 2>&1 |
      grep -E "image slice encoded in|batch encoding done in|n_tokens_batch|image size" |
      sed "s|^|$(basename "$image"): |"
  done
done
