#!/usr/bin/env bash
# Installs CUDA 13's compiler, headers and link libraries from PyPI into a cache directory, so
# that `cargo build --features cuda` works on a machine without a GPU or a CUDA toolkit.
# Prints the environment to use:  eval "$(scripts/cuda-toolchain.sh)"
#
# CUDA_TOOLCHAIN_DIR  where to install (default ~/.cache/hearth/cuda)
# CUDA_COMPUTE_CAP    the GPU generation to compile kernels for (default 90: H100/H200)
set -euo pipefail
dir="${CUDA_TOOLCHAIN_DIR:-$HOME/.cache/hearth/cuda}"
version="13.0"
root="$dir/nvidia/cu13"
stamp="$dir/.installed-$version"

if [[ ! -f "$stamp" ]]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --upgrade \
    --target "$dir" \
    "nvidia-cuda-nvcc==$version.*" "nvidia-cuda-runtime==$version.*" \
    "nvidia-cuda-cccl==$version.*" "nvidia-cuda-crt==$version.*" "nvidia-nvvm==$version.*" \
    "nvidia-cublas==13.*" "nvidia-curand==10.*" "nvidia-cuda-nvrtc==$version.*" >&2
  touch "$stamp"
fi

[[ -x "$root/bin/nvcc" ]] || { echo "cuda-toolchain: no nvcc at $root/bin/nvcc" >&2; exit 1; }

# The link step wants unversioned libX.so; the wheels carry libX.so.13 (or .so.10).
links="$dir/link"
mkdir -p "$links"
for lib in cudart cublas cublasLt curand nvrtc; do
  found=$(find "$dir/nvidia" -name "lib$lib.so.*" -type f 2>/dev/null | sort | head -n1)
  [[ -n "$found" ]] || { echo "cuda-toolchain: lib$lib.so.* not found under $dir/nvidia" >&2; exit 1; }
  ln -sf "$found" "$links/lib$lib.so"
done

# libcuda.so belongs to the driver, which no wheel ships: link against a stub exporting the
# driver API (soname libcuda.so.1); the real library is found at run time on a GPU machine.
if [[ ! -f "$links/libcuda.so" ]]; then
  stub=$(find "$dir/nvidia" -path '*stubs*' -name 'libcuda.so' 2>/dev/null | head -n1)
  if [[ -n "$stub" ]]; then
    cp "$stub" "$links/libcuda.so"
  else
    # No stub in the wheels: build one from the symbols candle's cudarc binds.
    echo "cuda-toolchain: no libcuda stub in the wheels; building one" >&2
    "$(dirname "$0")/cuda-stub.sh" "$links/libcuda.so"
  fi
fi

# At run time on a machine without a driver, the stub stands in for libcuda.so.1 (every call
# fails cleanly), so the CUDA build can start and run on the CPU.
ln -sf libcuda.so "$links/libcuda.so.1"

cat <<ENV
export PATH="$root/bin:\$PATH"
export CUDA_HOME="$root"
export CUDA_PATH="$root"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export NVCC_PREPEND_FLAGS="-I$root/include"
export RUSTFLAGS="\${RUSTFLAGS:-} -L native=$links"
export LIBRARY_PATH="$links:\${LIBRARY_PATH:-}"
export HEARTH_CUDA_RUNTIME_PATH="$links:$root/lib"
ENV
