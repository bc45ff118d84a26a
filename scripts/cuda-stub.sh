#!/usr/bin/env bash
# Builds a link-time stand-in for the CUDA driver library (libcuda.so, soname libcuda.so.1):
# one empty function per driver-API symbol that cudarc declares. It exists only so that the
# linker can resolve `-lcuda` on a machine without a GPU driver; at run time the real driver's
# libcuda.so.1 is loaded instead. Usage: scripts/cuda-stub.sh OUT.so
set -euo pipefail
out="$1"
registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
find_sys() { ls -d "$registry"/*/cudarc-0.19.*/src/driver/sys/mod.rs 2>/dev/null | sort -V | tail -n1 || true; }
sys=$(find_sys)
if [[ -z "$sys" ]]; then
  # cudarc is an optional dependency: a CPU build never downloads it.
  (cd "$(dirname "$0")/.." && cargo fetch --quiet) >&2
  sys=$(find_sys)
fi
[[ -n "$sys" ]] || { echo "cuda-stub: cudarc's sources are not in $registry, even after cargo fetch" >&2; exit 1; }
src=$(mktemp --suffix=.c)
trap 'rm -f "$src"' EXIT
grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$sys" | awk '{print $4}' | sort -u \
  | awk '{print "int " $1 "(void) { return 999; /* CUDA_ERROR_UNKNOWN */ }"}' >"$src"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$out" "$src"
echo "cuda-stub: $(grep -c . "$src") driver symbols from $sys" >&2
