#!/usr/bin/env bash
# Hearth, llama.cpp's llama-bench and candle-transformers' quantized_qwen2 on the same GGUF
# files and thread count, in one go (candle only for the Qwen2 files it runs). llama.cpp comes
# from scripts/llama-cpp.sh (built once into a cache outside the repository, ~6 min on 2 cores;
# needs cmake, e.g. `pip install cmake`).
# Writes benches/results/<date>[-L]-cpu[-LEVEL][-runN].json and prints a markdown table with ratios.
#
#   benches/gguf-side-by-side.sh [--cpu avx2|portable] [--depth N] [--label L] [threads] model.gguf [more.gguf ...]
#
# --depth N adds pp512 and tg64 after N tokens already in the KV cache (both programs' -d N):
# an agent's turn after a long conversation, where attention over the cache weighs as much as
# the weights.
#
# --cpu avx2 races at the AVX2 level on any x86 machine: llama.cpp is built a second time
# (build-avx2) with GGML_NATIVE=OFF and only AVX2/FMA/F16C on, and Hearth runs with
# HEARTH_CPU=avx2, so an AVX-512 machine measures the AVX2 race honestly.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
level=native
depth=0
label=
while true; do
  case "${1:-}" in
    --cpu) level=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    *) break ;;
  esac
done
case $level in native|avx2|portable) ;; *) echo "--cpu: expected avx2 or portable, got $level" >&2; exit 2 ;; esac
threads=${1:-2}; shift
[ $# -gt 0 ] || set -- "$("$repo/scripts/fetch-test-models.sh")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}

[ "$level" = native ] || export HEARTH_CPU=$level
llama=$("$repo/scripts/llama-cpp.sh" --cpu "$level" llama-bench)/llama-bench
(cd "$repo" && cargo build --release >&2 && cargo bench --no-run --bench candle_quantized >&2)
hearth=$CARGO_TARGET_DIR/release/hearth
candle=$(ls -t "$CARGO_TARGET_DIR"/release/deps/candle_quantized-* | grep -v '\.d$' | head -1)

base="$repo/benches/results/$(date +%F)-${label:+$label-}cpu$([ "$level" = native ] || echo "-$level")"
# Never over an earlier result of the same day: -run2, -run3, …
out=$base.json; n=2
while [ -e "$out" ]; do out=$base-run$n.json; n=$((n + 1)); done
python3 - "$out" "$depth" "$threads" "$hearth" "$llama" "$candle" "$@" <<'PY'
import json, os, subprocess, sys, pathlib
out, depth, threads, hearth, llama, candle, *models = sys.argv[1:]

def peak_rss_kib(cmd, env=None):
    """Runs cmd under /usr/bin/time and returns (stdout, peak resident set in KiB)."""
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, check=True,
                       env=env)
    return p.stdout, int(p.stderr.strip().splitlines()[-1])

rows, memory, per_token, bandwidth = [], [], {}, 0.0
for m in models:
    # Prefill 32 and 512 tokens, decode 64; candle's quantized prefill is too slow for 512.
    h, h_rss = peak_rss_kib([hearth, "bench", "-m", m, "-p", "32,512", "-n", "64", "-t", threads, "-r", "5", "--json"])
    h = json.loads(h)
    l, l_rss = peak_rss_kib([llama, "-m", m, "-p", "32,512", "-n", "64", "-t", threads, "-r", "5", "-o", "json"])
    l = json.loads(l)
    c = subprocess.run([candle, m, "32", "64", "3"], capture_output=True, text=True,
                       env={"RAYON_NUM_THREADS": threads})
    # candle-transformers' example runs Qwen2 files only (not qwen3, qwen3moe).
    c = json.loads(c.stdout) if c.returncode == 0 else []
    # The read bandwidth and the weights one token reads, from a run of its own (the
    # measurement's buffer would count in the peak RSS above).
    roof = json.loads(subprocess.run([hearth, "bench", "-m", m, "-p", "0", "-n", "16", "-t", threads, "-r", "1",
                                      "--roofline", "--json"], capture_output=True, text=True, check=True).stdout)[0]
    per_token[pathlib.Path(m).name] = roof["weight_bytes_per_token"]
    bandwidth = max(bandwidth, roof["read_bandwidth_gb_s"] * 1e9)
    memory.append({"model": pathlib.Path(m).name, "file_bytes": os.path.getsize(m),
                   "hearth_peak_rss_bytes": h_rss * 1024, "llama_cpp_peak_rss_bytes": l_rss * 1024})
    tests = ["pp32", "pp512", "tg64"]
    if depth != "0":
        # After `depth` cached tokens, prefilled once by each program (untimed).
        hd = json.loads(subprocess.run([hearth, "bench", "-m", m, "-p", "512", "-n", "64", "-d", depth, "-t", threads,
                                        "-r", "2", "--json"], capture_output=True, text=True, check=True).stdout)
        ld = json.loads(subprocess.run([llama, "-m", m, "-p", "512", "-n", "64", "-d", depth, "-t", threads, "-r", "2",
                                        "-o", "json"], capture_output=True, text=True, check=True).stdout)
        h, l = h + hd, l + ld
        tests += [f"pp512 @ d{depth}", f"tg64 @ d{depth}"]
    get = lambda rs, test: next((r["avg_ts"] for r in rs if r.get("test") == test), None)
    name = lambda r: (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + \
        (f" @ d{r['n_depth']}" if r.get("n_depth") else "")
    llama_t = {name(r): r["avg_ts"] for r in l}
    for test in tests:
        hv, lv, cv = get(h, test), llama_t[test], get(c, test)
        row = {"model": pathlib.Path(m).name, "test": test, "threads": int(threads), "hearth_ts": hv,
               "llama_cpp_ts": lv, "candle_transformers_ts": cv, "hearth_over_llama_cpp": hv / lv,
               "hearth_over_candle": hv / cv if cv else None}
        rows.append(row)
# Shares of the memory-bandwidth roofline (weight bytes per token × tok/s ÷ bandwidth), with the
# highest bandwidth measured in the whole run: a shared machine's drops while others work.
for row in rows:
    if row["test"].startswith("tg") and "@" not in row["test"]:  # at a depth the cache is read too
        b = per_token[row["model"]]
        row.update({"weight_bytes_per_token": b, "read_bandwidth_gb_s": bandwidth / 1e9,
                    "hearth_roofline": row["hearth_ts"] * b / bandwidth, "llama_cpp_roofline": row["llama_cpp_ts"] * b / bandwidth})
def cpu_name():
    """The CPU's model and the vector features the kernels care about, from /proc/cpuinfo."""
    try:
        info = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    field = lambda key: next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith(key)), "")
    flags = set(field("flags").split() or field("Features").split())
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_int8",
              "asimd", "asimddp"]
    return f"{field('model name') or 'unknown'}, {os.cpu_count()} cores; " + " ".join(f for f in wanted if f in flags)

level = os.environ.get("HEARTH_CPU")
cpu_flag = (f"--cpu {level} " if level else "") + (f"--depth {depth} " if depth != "0" else "")
pathlib.Path(out).write_text(json.dumps({"command": "benches/gguf-side-by-side.sh " + cpu_flag + " ".join([threads] + models),
                                         "hearth_cpu_level": level or "native", "cpu": cpu_name(),
                                         "rows": rows, "memory": memory}, indent=1))
print("| model | test | hearth t/s | llama.cpp t/s | candle t/s | hearth/llama.cpp | hearth/candle |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    c = f"{r['candle_transformers_ts']:.1f}" if r["candle_transformers_ts"] else "-"
    hc = f"{r['hearth_over_candle']:.2f}" if r["hearth_over_candle"] else "-"
    print(f"| {r['model']} | {r['test']} | {r['hearth_ts']:.1f} | {r['llama_cpp_ts']:.1f} | {c} | {r['hearth_over_llama_cpp']:.2f} | {hc} |")
for r in rows:
    if "hearth_roofline" in r:
        print(f"{r['model']} {r['test']}: {r['weight_bytes_per_token'] / 1e6:.0f} MB of weights per token, read bandwidth "
              f"{r['read_bandwidth_gb_s']:.1f} GB/s: hearth {100 * r['hearth_roofline']:.0f} %, llama.cpp {100 * r['llama_cpp_roofline']:.0f} % of the roofline")
for mem in memory:
    print(f"{mem['model']}: file {mem['file_bytes'] / 2**20:.0f} MiB, peak RSS hearth {mem['hearth_peak_rss_bytes'] / 2**20:.0f} MiB, "
          f"llama.cpp {mem['llama_cpp_peak_rss_bytes'] / 2**20:.0f} MiB")
print(f"wrote {out}")
PY
