#!/usr/bin/env bash
# The GPU check: one script, about ten minutes, for a machine with an NVIDIA GPU, PyTorch and
# transformers, no network and no Rust toolchain, given a prebuilt `hearth` binary:
#
#   benches/gpu-check.sh HEARTH OUT.json [--device cuda] [--shapes 0.5b,qwen3.5-9b-8l,30b-a3b-8l,7b]
#                        [--gguf-shapes 0.5b] [--llama-cpp DIR] [--tokenizer DIR] [--gen 128]
#
# (a) `hearth parity` on the tiny Qwen2, Qwen3, Qwen3-MoE, Qwen3.5 and Qwen3.5-MoE fixtures against
#     transformers' logits (bf16 and f32), and the quantized GGUF fixtures' greedy text on the
#     device against the CPU's,
# (b) random bf16 checkpoints in released shapes, made here with transformers: Qwen2.5-0.5B and 7B,
#     Qwen3.5-9B's hybrid layers and Qwen3-30B-A3B's expert layers (8 layers of each),
# (c) `hearth bench` on each (prefill, decode, and 1/8/32 requests at once), transformers' own
#     greedy generation on the same weights, and the --gguf-shapes again as a Q8_0 GGUF (by the
#     converter of llama.cpp's source tree, --llama-cpp, with a real Qwen --tokenizer),
# (d) the device's copy bandwidth, and each decode rate as a fraction of the memory roofline
#     (weight bytes read per token / seconds per token / bandwidth),
# (e) one JSON with everything, written to OUT.json after every part.
#
# On a build machine: `cargo build --release --features cuda`, strip the binary, copy it with this
# working tree. On the GPU machine the CUDA libraries come from PyTorch's NVIDIA wheels; this
# script puts them on LD_LIBRARY_PATH. Exercise it on a CPU first:
#
#   benches/gpu-check.sh target/release/hearth /tmp/check.json --device cpu --shapes tiny,0.5b --gen 16
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { sed -n 2,25p "$0" >&2; exit 2; }
hearth=$(realpath "$1"); out=$2; shift 2
[[ -x "$hearth" ]] || { echo "gpu-check: $hearth is not an executable hearth binary" >&2; exit 2; }

# PyTorch's NVIDIA wheels (cublas, curand, nvrtc, cudart) for the dynamically linked binary.
if libs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(d for d in glob.glob(os.path.join(sp, "nvidia", "**", "lib"), recursive=True) if os.path.isdir(d))
print(":".join(dirs))
PY
); then
  export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
exec python3 benches/gpu_check.py --hearth "$hearth" --out "$out" "$@"
