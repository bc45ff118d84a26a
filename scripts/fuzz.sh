#!/usr/bin/env bash
# Runs the property tests (crates/*/tests/fuzz.rs, and the server's request decoders in
# src/serve/fuzz.rs) for a time budget per target, in rounds of HEARTH_FUZZ_CASES cases
# per property, each round with fresh random inputs.
#   scripts/fuzz.sh [seconds-per-target] [agent engine graph serve]   (default 600, all four)
# Prints, per property, the cases run and whether any failed; exits non-zero on a failure.
set -u
budget=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(agent engine graph serve)
round=${HEARTH_FUZZ_CASES:-2000}
cd "$(dirname "$0")/.."

failed=0
for target in "${targets[@]}"; do
    case $target in
        # The server's request decoders are unit tests of the binary.
        serve) pkg=hearth; dir=.; build=(--bin hearth); filter=(serve::fuzz) ;;
        *) pkg="hearth-$target"; dir="crates/$target"; build=(--test fuzz); filter=() ;;
    esac
    exe=$(cargo test -p "$pkg" "${build[@]}" --no-run 2>&1 |
        sed -n 's/.*Executable \(unittests \)\{0,1\}\(tests\/fuzz.rs\|src\/main.rs\) (\(.*\))/\3/p' | tail -1)
    if [ -z "$exe" ]; then
        echo "$pkg: the fuzz tests do not build" >&2
        cargo test -p "$pkg" "${build[@]}" --no-run
        failed=1
        continue
    fi
    # Relative fixture paths are resolved against the crate, as cargo test does.
    log=$(mktemp)
    start=$SECONDS
    rounds=0
    status=ok
    while [ $((SECONDS - start)) -lt "$budget" ]; do
        if ! (cd "$dir" && HEARTH_FUZZ_CASES=$round "$exe" "${filter[@]}" --nocapture --test-threads 1) \
            >>"$log" 2>&1; then
            status=FAILED
            break
        fi
        rounds=$((rounds + 1))
    done
    echo "== $pkg: $rounds rounds in $((SECONDS - start))s, $status"
    # Each property prints `fuzz <name>: <n> cases` when it passes.
    # (with --nocapture it can follow the harness's `test … ` on the same line).
    sed -n 's/.*fuzz \([^:]*\): \([0-9]*\) cases$/\1\t\2/p' "$log" |
        awk -F'\t' '{n[$1] += $2} END {for (k in n) printf "   %-26s %d cases\n", k, n[k]}' |
        sort
    if [ "$status" != ok ]; then
        failed=1
        grep -E "panicked|minimal failing input|Test failed|FAILED" "$log" | head -20
        echo "   full log: $log"
    else
        rm -f "$log"
    fi
done
exit $failed
