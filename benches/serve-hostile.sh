#!/usr/bin/env bash
# How much hostile clients slow the others: a well-behaved client's streamed chat requests
# (time to first token, whole latency) alone, then the same requests while 64 slowloris
# connections trickle headers, 8 clients send bodies that never end, 4 upload 40 MB bodies,
# 8 send 100,000-deep JSON, each every 0.2 s; then with 8 more that open streams and drop them
# (benches/serve_hostile.py). Writes benches/results/<date>-serve-hostile.json.
#
#   benches/serve-hostile.sh [hearth binary] [model.gguf] [requests] [threads]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hearth=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}/release/hearth}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
requests=${3:-20}; threads=${4:-2}
export RAYON_NUM_THREADS=$threads
. "$repo/benches/serve-start.sh"
start_server "$hearth" "$model" --header-timeout 10 --body-timeout 30
out="$repo/benches/results/$(date +%F)-serve-hostile.json"
python3 "$repo/benches/serve_hostile.py" "$addr" "$requests" >"$out"
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for phase in ("alone", "hostile", "hostile_and_dropped"):
    p = r[phase]
    print(f"{phase:8} TTFT p50 {p['ttft_p50_ms']:.0f} ms p99 {p['ttft_p99_ms']:.0f} ms, "
          f"latency p50 {p['latency_p50_ms']:.0f} ms p99 {p['latency_p99_ms']:.0f} ms, errors {p['errors']}")
print(f"slowdown beside {r['hostile_clients']} hostile clients: TTFT p50 {r['ttft_p50_ratio']:.2f}x, "
      f"latency p50 {r['latency_p50_ratio']:.2f}x; with {r['dropping_clients']} more that start answers "
      f"and leave: {r['with_drops_ttft_p50_ratio']:.2f}x, {r['with_drops_latency_p50_ratio']:.2f}x")
print(f"hostile requests answered: {r['hostile_counts']}")
print(f"wrote {sys.argv[1]}")
PY
