#!/usr/bin/env bash
# `hearth serve` soaked: the real test GGUF (or MODEL), then benches/serve_soak.py with C
# clients for M minutes of mixed requests (chat whole and streamed, forced tool calls, JSON
# schema, raw completions, dropped streams). Writes benches/results/<date>-serve-soak.json and
# prints the errors and the growth of RSS and of the KV cache after warm-up.
#
#   benches/serve-soak.sh [hearth binary] [model.gguf] [minutes] [clients] [threads]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hearth=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}/release/hearth}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
minutes=${3:-30}; clients=${4:-8}; threads=${5:-2}
export RAYON_NUM_THREADS=$threads
. "$repo/benches/serve-start.sh"
start_server "$hearth" "$model"
out="$repo/benches/results/$(date +%F)-serve-soak.json"
python3 "$repo/benches/serve_soak.py" "http://$addr/v1" "$pid" "$minutes" "$clients" >"$out"
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['minutes']} min, {r['clients']} clients: {sum(r['requests'].values())} requests, "
      f"{sum(r['errors'].values())} errors {r['errors']}")
print(f"RSS after warm-up {r['rss_kib_after_warmup'] / 1024:.1f} MiB, at the end {r['rss_kib_end'] / 1024:.1f} MiB, "
      f"max {r['rss_kib_max'] / 1024:.1f} MiB")
print(f"KV cache after warm-up {r['kv_bytes_after_warmup'] / 2**20:.1f} MiB, idle at the end "
      f"{r['kv_bytes_end_idle'] / 2**20:.1f} MiB, max {r['kv_bytes_max'] / 2**20:.1f} MiB")
print(f"wrote {sys.argv[1]}")
PY
