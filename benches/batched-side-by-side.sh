#!/usr/bin/env bash
# Many requests at once: `hearth bench --concurrency` against llama.cpp's llama-batched-bench on
# the same GGUF file and thread count, in one go. llama.cpp is the build that
# benches/gguf-side-by-side.sh makes (same source, same cache; run that once first, or this
# builds only llama-batched-bench from the source it unpacked).
# Writes benches/results/<date>-batched-cpu.json and prints a markdown table with ratios.
#
#   benches/batched-side-by-side.sh [threads] [model.gguf] [prompt tokens] [generated tokens]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
pp=${3:-32}
tg=${4:-64}
cache=${HEARTH_CACHE:-$HOME/.cache/hearth}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}

src=$cache/llama.cpp
llama=$src/build/bin/llama-batched-bench
if [ ! -x "$llama" ]; then
  [ -f "$src/CMakeLists.txt" ] || { echo "no llama.cpp source in $src: run benches/gguf-side-by-side.sh once" >&2; exit 1; }
  (cd "$src" && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF >&2 \
     && cmake --build build -j"$threads" --target llama-batched-bench >&2)
fi
(cd "$repo" && cargo build --release >&2)
hearth=$CARGO_TARGET_DIR/release/hearth

out="$repo/benches/results/$(date +%F)-batched-cpu.json"
python3 - "$out" "$threads" "$hearth" "$llama" "$model" "$pp" "$tg" <<'PY'
import json, subprocess, sys, pathlib
out, threads, hearth, llama, model, pp, tg = sys.argv[1:]
widths = [1, 2, 4, 8]
npl = ",".join(map(str, widths))
h = json.loads(subprocess.run([hearth, "bench", "-m", model, "--concurrency", npl, "-p", pp, "-n", tg,
                               "-t", threads, "-r", "3", "--json"], capture_output=True, text=True, check=True).stdout)
ctx = str(max(widths) * (int(pp) + int(tg)) + 64)
l = subprocess.run([llama, "-m", model, "-c", ctx, "-b", "2048", "-ub", "512", "-npp", pp, "-ntg", tg,
                    "-npl", npl, "-t", threads, "-tb", threads, "--output-format", "jsonl"],
                   capture_output=True, text=True, check=True).stdout
l = [json.loads(x) for x in l.splitlines() if x.startswith("{")]
lb = {r["pl"]: r for r in l}
rows = []
for r in h:
    o = lb[r["b"]]
    rows.append({"b": r["b"], "pp": r["pp"], "tg": r["tg"], "threads": int(threads),
                 "hearth_s_pp": r["s_pp"], "llama_cpp_s_pp": o["speed_pp"],
                 "hearth_s_tg": r["s_tg"], "llama_cpp_s_tg": o["speed_tg"],
                 "hearth_s": r["s"], "llama_cpp_s": o["speed"],
                 "hearth_ttft_join_s": r["ttft_join_s"], "hearth_peak_rss_mib": r["peak_rss_mib"]})
one = next(r for r in rows if r["b"] == 1)
pathlib.Path(out).write_text(json.dumps({"command": " ".join(["benches/batched-side-by-side.sh"] + sys.argv[2:3] + [model, pp, tg]),
                                         "rows": rows}, indent=1))
print("| B | hearth S_PP | llama.cpp S_PP | hearth S_TG | llama.cpp S_TG | S_TG ratio | hearth S_TG / B=1 | TTFT joining B-1 (s) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['b']} | {r['hearth_s_pp']:.1f} | {r['llama_cpp_s_pp']:.1f} | {r['hearth_s_tg']:.1f} | {r['llama_cpp_s_tg']:.1f} | "
          f"{r['hearth_s_tg'] / r['llama_cpp_s_tg']:.2f} | {r['hearth_s_tg'] / one['hearth_s_tg']:.2f} | {r['hearth_ttft_join_s']:.3f} |")
print(f"wrote {out}")
PY
