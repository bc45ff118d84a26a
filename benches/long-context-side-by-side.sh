#!/usr/bin/env bash
# Long context, side by side: Hearth's `bench -d` and llama.cpp's `llama-bench -d` on one GGUF,
# per KV cache type (llama.cpp's -ctk/-ctv with -fa 0 and 1 — a quantized cache only with flash
# attention, which llama.cpp requires for it — against Hearth's --cache-type-k/-v), in one go.
# llama.cpp comes from scripts/llama-cpp.sh (built once into a cache outside the repository).
# Writes benches/results/<date>-long-context-side-by-side-cpu[-LEVEL][-runN].json and prints a
# table: each test, Hearth's rate, llama.cpp's faster of fa 0/1 with the same cache type, and
# the ratio.
#
#   benches/long-context-side-by-side.sh [--cpu avx2] [--depths 0,4096,16384] [--types f16,q8_0] [threads] [model.gguf]
#
# --cpu avx2 builds llama.cpp with AVX2/FMA/F16C only and runs Hearth with HEARTH_CPU=avx2.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
level=native; depths=0,4096,16384; types=f16,q8_0
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) level=$2; shift 2 ;;
    --depths) depths=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    *) break ;;
  esac
done
case $level in native|avx2) ;; *) echo "--cpu: expected avx2, got $level" >&2; exit 2 ;; esac
threads=${1:-2}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}
[ "$level" = native ] || export HEARTH_CPU=$level
llama=$("$repo/scripts/llama-cpp.sh" --cpu "$level" llama-bench)/llama-bench
(cd "$repo" && cargo build --release >&2)
hearth=$CARGO_TARGET_DIR/release/hearth

base="$repo/benches/results/$(date +%F)-long-context-side-by-side-cpu$([ "$level" = native ] || echo "-$level")"
out=$base.json; n=2
while [ -e "$out" ]; do out=$base-run$n.json; n=$((n + 1)); done
runs=$(mktemp -d)
for t in ${types//,/ }; do
  fa=0,1; [ "$t" = f16 ] || [ "$t" = f32 ] || fa=1
  echo "llama-bench, cache $t, -fa $fa" >&2
  "$llama" -m "$model" -t "$threads" -p 512 -n 32 -d "$depths" -r 1 -fa "$fa" -ctk "$t" -ctv "$t" -o json \
    > "$runs/llama-$t.json"
  echo "hearth bench, cache $t" >&2
  "$hearth" bench -m "$model" -t "$threads" -p 512 -n 32 -d "$depths" -r 1 --cache-type-k "$t" \
    --cache-type-v "$t" --json > "$runs/hearth-$t.json"
done
python3 - "$out" "$runs" "$level" "$threads" "$model" "$types" <<'PY'
import datetime, json, pathlib, subprocess, sys
out, runs, level, threads, model, types = sys.argv[1:]
runs = pathlib.Path(runs)
cpu = subprocess.run(["bash", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                     capture_output=True, text=True).stdout.strip()
rows, raw = [], {}
for t in types.split(","):
    llama = json.loads((runs / f"llama-{t}.json").read_text())
    hearth = json.loads((runs / f"hearth-{t}.json").read_text())
    raw[t] = {"llama": llama, "hearth": hearth}
    for h in hearth:
        test = (h["n_prompt"], h["n_gen"], h["n_depth"])
        same = [l for l in llama if (l["n_prompt"], l["n_gen"], l["n_depth"]) == test]
        best = max(same, key=lambda l: l["avg_ts"], default=None)
        name = f"pp{h['n_prompt']}" if h["n_prompt"] else f"tg{h['n_gen']}"
        if h["n_depth"]:
            name += f" @ d{h['n_depth']}"
        rows.append({"cache": t, "test": name, "hearth": h["avg_ts"],
                     "llama": best and best["avg_ts"], "llama_fa": best and int(bool(best.get("flash_attn"))),
                     "ratio": best and h["avg_ts"] / best["avg_ts"]})
result = {"date": datetime.date.today().isoformat(), "cpu": cpu, "level": level, "threads": int(threads),
          "model": model, "rows": rows, "raw": raw}
pathlib.Path(out).write_text(json.dumps(result, indent=1) + "\n")
print("| cache | test | Hearth | llama.cpp (fa) | Hearth ÷ llama.cpp |")
print("|---|---|---|---|---|")
for r in rows:
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"
    print(f"| {r['cache']} | {r['test']} | {f(r['hearth'])} | {f(r['llama'])} ({r['llama_fa']}) "
          f"| {f(r['ratio'], 2)} |")
print(f"written: {out}")
PY
