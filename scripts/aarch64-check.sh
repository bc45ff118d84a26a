#!/usr/bin/env bash
# Hearth on 64-bit ARM (Apple Silicon under Linux, Graviton, Ampere), checked from an x86-64
# machine with Debian's packages only (no rustup download): Debian's rustc (the `rustc-web`
# build) with its aarch64 standard library and the aarch64 C cross compiler.
#
#   scripts/aarch64-check.sh            # cargo check of the engine (every CPU-specific line
#                                       # is there) for aarch64: in CI
#   scripts/aarch64-check.sh --all      # the whole workspace, every target (~40 min cold)
#   scripts/aarch64-check.sh --test     # the engine's kernel tests built for aarch64 and run
#                                       # under qemu-aarch64 (slow: a full aarch64 build)
#
# Debian's compiler is called by path (RUSTC=/usr/bin/rustc, /usr/bin/cargo) and builds into
# its own target folder, so the rustup toolchain and its build cache are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
run_tests=0
scope=(-p hearth-engine --lib)
case "${1:-}" in
    --test) run_tests=1 ;;
    --all) scope=(--workspace --all-targets) ;;
    "") ;;
    *) echo "usage: $0 [--all | --test]" >&2; exit 2 ;;
esac

target=aarch64-unknown-linux-gnu
export CARGO_TARGET_DIR="${HEARTH_AARCH64_TARGET_DIR:-$HOME/.cache/hearth-target-aarch64}"
export CARGO_TERM_COLOR=never

need=()
[[ -x /usr/bin/rustc && -x /usr/bin/cargo ]] || need+=(rustc-web cargo-web)
[[ -d /usr/lib/rustlib/$target ]] || need+=(libstd-rust-web-dev:arm64)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if ((run_tests)); then
    command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
fi
if ((${#need[@]})); then
    echo "installing ${need[*]} (apt)" >&2
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

export RUSTC=/usr/bin/rustc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
echo "$($RUSTC --version), target $target" >&2

/usr/bin/cargo check --target "$target" "${scope[@]}"

if ((run_tests)); then
    # Linked statically: under Debian 12's qemu-aarch64 (7.2) a dynamically linked binary hangs
    # in glibc when it starts its first thread. Its own target folder, so that the flag does
    # not rebuild the check's.
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR-static"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64
    /usr/bin/cargo test --target "$target" -p hearth-engine --lib kernels
fi
echo "aarch64: ok" >&2
