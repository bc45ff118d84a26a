#!/usr/bin/env bash
# `hearth serve` under load: the real test GGUF (or MODEL), then benches/serve_load.py with B
# clients at once, each streaming greedy chat completions; every answer must equal the same
# prompt answered alone. Prints a table: throughput and p50/p99 time to first token.
#
#   benches/serve-load.sh [hearth binary] [model.gguf] [threads] [B list] [requests per client] [max tokens]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hearth=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}/release/hearth}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
threads=${3:-2}; widths=${4:-1,8,32,64}; per=${5:-2}; max=${6:-32}
export RAYON_NUM_THREADS=$threads
. "$repo/benches/serve-start.sh"
start_server "$hearth" "$model"
rows=$(python3 "$repo/benches/serve_load.py" "http://$addr/v1" "$widths" "$per" "$max")
python3 - "$rows" <<'PY'
import json, sys
print("| clients | requests | errors | answers unlike alone | tokens/s | requests/s | TTFT p50 (s) | TTFT p99 (s) |")
print("|---|---|---|---|---|---|---|---|")
for line in sys.argv[1].splitlines():
    r = json.loads(line)
    print(f"| {r['clients']} | {r['requests']} | {r['errors'] or 0} | {r['mismatches']} | {r['tokens_per_s']} | "
          f"{r['requests_per_s']} | {r['ttft_p50_s']} | {r['ttft_p99_s']} |")
PY
