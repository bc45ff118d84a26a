#!/usr/bin/env bash
# Many requests at once: `hearth bench --concurrency` against llama.cpp's llama-batched-bench on
# the same GGUF file and thread count, in one go, at B = 1, 2, 4, 8 and 16. llama.cpp is the
# build of scripts/llama-cpp.sh (with --cpu avx2, both sides run their AVX2 code). Hearth runs
# with --speculative off: llama-batched-bench drafts nothing, and its random prompts say
# nothing of what drafts would be accepted.
# Writes benches/results/<date>-batched-cpu[-avx2].json and prints a markdown table with ratios.
#
#   benches/batched-side-by-side.sh [--cpu avx2] [threads] [model.gguf] [prompt tokens] [generated tokens]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
level=native
if [ "${1:-}" = --cpu ]; then level=$2; shift 2; fi
threads=${1:-2}
model=${2:-$("$repo/scripts/fetch-test-models.sh")}
pp=${3:-32}
tg=${4:-64}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}
llama=$("$repo/scripts/llama-cpp.sh" --cpu "$level" llama-batched-bench)/llama-batched-bench
suffix=""
if [ "$level" = avx2 ]; then export HEARTH_CPU=avx2; suffix=-avx2; fi
(cd "$repo" && cargo build --release >&2)
hearth=$CARGO_TARGET_DIR/release/hearth

out="$repo/benches/results/$(date +%F)-batched-cpu$suffix.json"
python3 - "$out" "$threads" "$hearth" "$llama" "$model" "$pp" "$tg" "$level" <<'PY'
import json, subprocess, sys, pathlib
out, threads, hearth, llama, model, pp, tg, level = sys.argv[1:]
widths = [1, 2, 4, 8, 16]
def ticks():
    # /proc/stat's cpu line: user nice system idle iowait irq softirq steal.
    t = [int(v) for v in open("/proc/stat").readline().split()[1:9]]
    return t[7], sum(t)
steal0 = ticks()
npl = ",".join(map(str, widths))
h = json.loads(subprocess.run([hearth, "bench", "-m", model, "--concurrency", npl, "-p", pp, "-n", tg,
                               "-t", threads, "-r", "3", "--speculative", "off", "--json"], capture_output=True, text=True, check=True).stdout)
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
steal1 = ticks()
steal = (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1])
pathlib.Path(out).write_text(json.dumps({"command": " ".join(["benches/batched-side-by-side.sh"] + (["--cpu", level] if level != "native" else []) + [threads, model, pp, tg]),
                                         "steal": steal, "rows": rows}, indent=1))
print("| B | hearth S_PP | llama.cpp S_PP | hearth S_TG | llama.cpp S_TG | S_TG ratio | hearth S_TG / B=1 | TTFT joining B-1 (s) |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['b']} | {r['hearth_s_pp']:.1f} | {r['llama_cpp_s_pp']:.1f} | {r['hearth_s_tg']:.1f} | {r['llama_cpp_s_tg']:.1f} | "
          f"{r['hearth_s_tg'] / r['llama_cpp_s_tg']:.2f} | {r['hearth_s_tg'] / one['hearth_s_tg']:.2f} | {r['hearth_ttft_join_s']:.3f} |")
print(f"CPU time stolen by the hypervisor meanwhile: {100 * steal:.0f} %")
print(f"wrote {out}")
PY
