#!/usr/bin/env bash
# llama.cpp from the source bundled in a llama-cpp-python sdist (fetched through PyPI's simple
# index, sha256-checked, never built by pip), built once per CPU level into a cache outside the
# repository (needs cmake, e.g. `pip install cmake`). Prints the folder of the built programs;
# the source folder (with convert_hf_to_gguf.py and gguf-py) is its grandparent.
#
#   scripts/llama-cpp.sh [--cpu native|avx2|portable] TARGET...   e.g. llama-bench llama-quantize
#
# LLAMA_CPP_PYTHON picks the sdist: 0.3.36 (llama.cpp of 2026-10, with Qwen3.5's qwen35 and
# qwen35moe) by default; 0.3.16 (2025) is the one the earlier benchmark files name.
#
# --cpu avx2 builds with GGML_NATIVE=OFF and only AVX2/FMA/F16C (build-avx2), so an AVX-512
# machine can race llama.cpp at the AVX2 level; --cpu portable without any vector extension.
set -euo pipefail
level=native
if [ "${1:-}" = --cpu ]; then level=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: $0 [--cpu native|avx2|portable] TARGET..." >&2; exit 2; }
cache=${HEARTH_CACHE:-$HOME/.cache/hearth}
version=${LLAMA_CPP_PYTHON:-0.3.36}
case $version in
  0.3.16) src=$cache/llama.cpp ;;
  *) src=$cache/llama.cpp-$version/src ;;
esac
build=build
# AMX tiles are left out: on machines that list them but do not grant the process their
# state (virtual machines), ggml's AMX kernels stop on an illegal instruction.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake_cpu=(-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
           "-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx")
case $level in
  native) ;;
  avx2) build=build-avx2
        cmake_cpu=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
                   -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF) ;;
  portable) build=build-portable
        cmake_cpu=(-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF) ;;
  *) echo "--cpu: expected native, avx2 or portable, got $level" >&2; exit 2 ;;
esac
if [ ! -f "$src/CMakeLists.txt" ]; then
  tmp=$(mktemp -d)
  "$(dirname "$0")/pypi-sdist.sh" llama-cpp-python "$version" "$tmp/sdist.tar.gz"
  mkdir -p "$src"
  tar xzf "$tmp/sdist.tar.gz" -C "$tmp"
  cp -r "$tmp/llama_cpp_python-$version/vendor/llama.cpp/." "$src/"
  rm -rf "$tmp"
fi
missing=()
for t in "$@"; do [ -x "$src/$build/bin/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  command -v cmake >/dev/null || { echo "llama-cpp.sh: cmake is needed to build llama.cpp (pip install cmake)" >&2; exit 1; }
  (cd "$src" && cmake -B "$build" -DCMAKE_BUILD_TYPE=Release "${cmake_cpu[@]}" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2 \
     && cmake --build "$build" -j"${JOBS:-2}" --target "${missing[@]}" >&2)
fi
echo "$src/$build/bin"
