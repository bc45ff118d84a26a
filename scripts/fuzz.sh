#!/usr/bin/env bash
# Runs the property tests (crates/*/tests/fuzz.rs) for a time budget per crate, in rounds of
# HEARTH_FUZZ_CASES cases per property, each round with fresh random inputs.
#   scripts/fuzz.sh [seconds-per-target]     (default 600)
# Prints, per property, the cases run and whether any failed; exits non-zero on a failure.
set -u
budget=${1:-600}
round=${HEARTH_FUZZ_CASES:-2000}
cd "$(dirname "$0")/.."

failed=0
for crate in agent engine graph; do
    pkg="hearth-$crate"
    exe=$(cargo test -p "$pkg" --test fuzz --no-run 2>&1 |
        sed -n 's/.*Executable tests\/fuzz.rs (\(.*\))/\1/p' | tail -1)
    if [ -z "$exe" ]; then
        echo "$pkg: the fuzz tests do not build" >&2
        cargo test -p "$pkg" --test fuzz --no-run
        failed=1
        continue
    fi
    # Relative fixture paths are resolved against the crate, as cargo test does.
    log=$(mktemp)
    start=$SECONDS
    rounds=0
    status=ok
    while [ $((SECONDS - start)) -lt "$budget" ]; do
        if ! (cd "crates/$crate" && HEARTH_FUZZ_CASES=$round "$exe" --nocapture --test-threads 1) \
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
