#!/usr/bin/env bash
# Generation through `hearth serve` against the engine in process, on one build, one model and
# one thread count: `hearth bench --concurrency` first, then the same prompts (fresh token ids,
# ignore_eos) from B HTTP clients at once (benches/serve_bench.py). Prints both and the ratios.
#
#   benches/serve-side-by-side.sh [hearth binary] [model.gguf] [threads] [pp] [tg] [B list]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hearth=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}/release/hearth}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
threads=${3:-2}; pp=${4:-32}; tg=${5:-128}; widths=${6:-1,8}
export RAYON_NUM_THREADS=$threads

inproc=$("$hearth" bench -m "$model" --concurrency "$widths" -p "$pp" -n "$tg" -t "$threads" -r 3 --json -q)
. "$repo/benches/serve-start.sh"
start_server "$hearth" "$model" --max-seqs 8
vocab=$(curl -s "http://$addr/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["meta"]["n_vocab"])')
served=$(python3 "$repo/benches/serve_bench.py" "http://$addr/v1" "$vocab" "$pp" "$tg" "$widths")
python3 - "$inproc" "$served" <<'PY'
import json, sys
inproc = {r["b"]: r for r in json.loads(sys.argv[1])}
print("| B | in process S_TG | through the server S_TG | server ÷ in process | server TTFT (s) |")
print("|---|---|---|---|---|")
for r in json.loads(sys.argv[2]):
    i = inproc[r["b"]]
    print(f"| {r['b']} | {i['s_tg']:.1f} | {r['s_tg']:.1f} | {r['s_tg'] / i['s_tg']:.2f} | {r['ttft_s']:.2f} |")
PY
