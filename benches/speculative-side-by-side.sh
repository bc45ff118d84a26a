#!/usr/bin/env bash
# Speculative decoding through each server, side by side with llama.cpp on one GGUF, one
# thread count and the same requests (benches/speculative_serve.py: two code edits of a
# 1,000-token file and three chat questions, greedy, one at a time): `hearth serve
# --speculative off` and `ngram`, and llama-server without drafts and with `--spec-type
# ngram-simple` and `ngram-mod`. With `--draft SMALL.gguf`, a draft model instead: `hearth
# serve --speculative off` and `draft --draft-model SMALL.gguf`, and llama-server without
# drafts and with `-md SMALL.gguf --spec-type draft-simple` at its default draft length (3)
# and at 16. Prints a table of decode tok/s and acceptance; writes
# benches/results/<date>-speculative-serve-<model>[-draft][-avx2].json.
#
#   benches/speculative-side-by-side.sh [--cpu avx2] [--draft SMALL.gguf] [model.gguf] [threads] [hearth binary]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
level=native
if [ "${1:-}" = --cpu ]; then level=$2; shift 2; fi
draft=""
if [ "${1:-}" = --draft ]; then draft=$2; shift 2; fi
model=${1:-$("$repo/scripts/fetch-test-models.sh")}
threads=${2:-2}
hearth=${3:-${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}/release/hearth}
llama=$("$repo/scripts/llama-cpp.sh" --cpu "$level" llama-server)
suffix=""
if [ "$level" = avx2 ]; then export HEARTH_CPU=avx2; suffix=-avx2; fi
export RAYON_NUM_THREADS=$threads
. "$repo/benches/serve-start.sh"
out=$(mktemp -d)
stat_before=$(head -1 /proc/stat)

if [ -n "$draft" ]; then
  hearth_specs=(off draft) llama_specs=(none draft-simple draft-simple-16) suffix=-draft$suffix
else
  hearth_specs=(off ngram) llama_specs=(none ngram-simple ngram-mod)
fi

for spec in "${hearth_specs[@]}"; do
  extra=()
  [ "$spec" = draft ] && extra=(--draft-model "$draft")
  start_server "$hearth" "$model" --speculative "$spec" "${extra[@]}"
  python3 "$repo/benches/speculative_serve.py" "http://$addr/v1" > "$out/hearth-$spec.json"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done

for spec in "${llama_specs[@]}"; do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  args=(-m "$model" -t "$threads" -c 8192 -np 1 --host 127.0.0.1 --port "$port")
  case $spec in
    none) ;;
    draft-simple) args+=(-md "$draft" --spec-type draft-simple) ;;
    draft-simple-16) args+=(-md "$draft" --spec-type draft-simple --spec-draft-n-max 16) ;;
    *) args+=(--spec-type "$spec") ;;
  esac
  "$llama/llama-server" "${args[@]}" > "$out/llama-$spec.log" 2>&1 &
  lpid=$!
  for _ in $(seq 240); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
  python3 "$repo/benches/speculative_serve.py" "http://127.0.0.1:$port/v1" > "$out/llama-$spec.json"
  kill "$lpid"; wait "$lpid" 2>/dev/null || true
done

name=$(basename "$model" .gguf)
python3 - "$out" "$repo/benches/results/$(date +%F)-speculative-serve-$name$suffix.json" "$model" "$threads" "$level" "$stat_before" "$(head -1 /proc/stat)" "$draft" <<'PY'
import json, pathlib, sys
out, dest, model, threads, level = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
draft = sys.argv[8]
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal.
t0, t1 = ([int(v) for v in line.split()[1:9]] for line in sys.argv[6:8])
steal = (t1[7] - t0[7]) / max(1, sum(t1) - sum(t0))
runs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
off = runs["hearth-off"]
print(f"{model}{', draft ' + draft if draft else ''}, {threads} threads, CPU level {level}")
print("| server | edit tok/s | edit × own plain | edit acceptance | chat tok/s | chat × own plain | chat acceptance |")
print("|---|---|---|---|---|---|---|")
names = sorted(runs, key=lambda n: (not n.startswith("hearth"), n not in ("hearth-off", "llama-none"), n))
for name in names:
    r = runs[name]["totals"]
    base = runs["hearth-off" if name.startswith("hearth") else "llama-none"]["totals"]
    cell = lambda k: f"{r[k]['tok_s']:.1f} | {r[k]['tok_s'] / base[k]['tok_s']:.2f} | " + (f"{100 * r[k]['acceptance']:.0f} %" if r[k]["acceptance"] is not None else "–")
    print(f"| {name} | {cell('edit')} | {cell('chat')} |")
same = all(a["text"] == b["text"] for name in names if name.startswith("hearth-") and name != "hearth-off"
           for a, b in zip(off["runs"], runs[name]["runs"]))
print(f"hearth with and without speculation wrote the same answers: {same}")
print(f"CPU time stolen by the hypervisor meanwhile: {100 * steal:.0f} %")
json.dump({"command": f"benches/speculative-side-by-side.sh {'--cpu avx2 ' if level == 'avx2' else ''}{'--draft ' + draft + ' ' if draft else ''}{model} {threads}",
           "threads": int(threads), "cpu_level": level, "same_answers": same, "steal": steal,
           "servers": {k: v["totals"] for k, v in runs.items()}, "runs": runs}, open(dest, "w"), indent=1)
print(f"wrote {dest}")
PY
rm -rf "$out"
