#!/usr/bin/env bash
# llama.cpp's tokenizer test data for Qwen: the vocabulary-only GGUF files of Qwen2 and Qwen3.5
# (`ggml-vocab-qwen2.gguf`, `ggml-vocab-qwen35.gguf`: the real tokenizers, no weights) with
# their tokenization cases (`.inp`: texts, `.out`: llama.cpp's ids), from the llama-cpp-python
# 0.3.36 sdist on PyPI (sha256-checked). Prints the directory; the tests look there
# (`$HEARTH_CACHE/llama-vocab`), or at HEARTH_LLAMA_VOCAB.
#
#   scripts/fetch-llama-vocab.sh
set -euo pipefail
out=${1:-${HEARTH_CACHE:-$HOME/.cache/hearth}/llama-vocab}
files=()
for v in qwen2 qwen35; do files+=("ggml-vocab-$v.gguf" "ggml-vocab-$v.gguf.inp" "ggml-vocab-$v.gguf.out"); done
have=1
for f in "${files[@]}"; do [ -s "$out/$f" ] || have=0; done
if [ $have = 1 ]; then echo "$out"; exit 0; fi
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$(dirname "$0")/pypi-sdist.sh" llama-cpp-python 0.3.36 "$tmp/sdist.tar.gz"
models=llama_cpp_python-0.3.36/vendor/llama.cpp/models
tar xzf "$tmp/sdist.tar.gz" -C "$tmp" "${files[@]/#/$models/}"
for f in "${files[@]}"; do cp "$tmp/$models/$f" "$out/$f"; done
echo "$out"
