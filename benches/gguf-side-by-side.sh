#!/usr/bin/env bash
# Hearth, llama.cpp's llama-bench and candle-transformers' quantized_qwen2 on the same GGUF
# files and thread count, in one go. llama.cpp comes from the source bundled in the PyPI sdist
# of llama-cpp-python (fetched through PyPI's simple index, sha256-checked, never built by
# pip), built once into a cache outside the repository (~6 min on 2 cores; needs cmake,
# e.g. `pip install cmake`).
# Writes benches/results/<date>-cpu.json and prints a markdown table with ratios.
#
#   benches/gguf-side-by-side.sh [threads] model.gguf [more.gguf ...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}; shift
[ $# -gt 0 ] || set -- "$("$repo/scripts/fetch-test-models.sh")"
cache=${HEARTH_CACHE:-$HOME/.cache/hearth}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}

llama=$cache/llama.cpp/build/bin/llama-bench
if [ ! -x "$llama" ]; then
  tmp=$(mktemp -d)
  python3 - "$tmp/sdist.tar.gz" <<'PY'
import hashlib, re, sys, urllib.request
html = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
url = re.search(r'href="([^"]*llama_cpp_python-0\.3\.16\.tar\.gz)#sha256=([0-9a-f]+)', html)
data = urllib.request.urlopen(url.group(1)).read()
if hashlib.sha256(data).hexdigest() != url.group(2):
    sys.exit("sha256 mismatch for the llama-cpp-python sdist")
open(sys.argv[1], "wb").write(data)
PY
  mkdir -p "$cache/llama.cpp"
  tar xzf "$tmp/sdist.tar.gz" -C "$tmp"
  cp -r "$tmp"/llama_cpp_python-0.3.16/vendor/llama.cpp/. "$cache/llama.cpp/"
  (cd "$cache/llama.cpp" && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF >&2 \
     && cmake --build build -j"$threads" --target llama-bench >&2)
fi
(cd "$repo" && cargo build --release >&2 && cargo bench --no-run --bench candle_quantized >&2)
hearth=$CARGO_TARGET_DIR/release/hearth
candle=$(ls -t "$CARGO_TARGET_DIR"/release/deps/candle_quantized-* | grep -v '\.d$' | head -1)

out="$repo/benches/results/$(date +%F)-cpu.json"
python3 - "$out" "$threads" "$hearth" "$llama" "$candle" "$@" <<'PY'
import json, subprocess, sys, pathlib
out, threads, hearth, llama, candle, *models = sys.argv[1:]
rows = []
for m in models:
    h = json.loads(subprocess.run([hearth, "bench", "-m", m, "-p", "32", "-n", "64", "-t", threads, "-r", "3", "--json"],
                                  capture_output=True, text=True, check=True).stdout)
    l = json.loads(subprocess.run([llama, "-m", m, "-p", "32", "-n", "64", "-t", threads, "-r", "3", "-o", "json"],
                                  capture_output=True, text=True, check=True).stdout)
    c = json.loads(subprocess.run([candle, m, "32", "64", "3"], capture_output=True, text=True, check=True,
                                  env={"RAYON_NUM_THREADS": threads}).stdout)
    get = lambda rs, key, test: next(r[key] for r in rs if r.get("test") == test)
    llama_t = {("pp32" if r["n_prompt"] else "tg64"): r["avg_ts"] for r in l}
    for test in ["pp32", "tg64"]:
        hv, lv, cv = get(h, "avg_ts", test), llama_t[test], get(c, "avg_ts", test)
        rows.append({"model": pathlib.Path(m).name, "test": test, "threads": int(threads), "hearth_ts": hv,
                     "llama_cpp_ts": lv, "candle_transformers_ts": cv, "hearth_over_llama_cpp": hv / lv,
                     "hearth_over_candle": hv / cv})
pathlib.Path(out).write_text(json.dumps({"command": "benches/gguf-side-by-side.sh " + " ".join(sys.argv[2:3] + models), "rows": rows}, indent=1))
print("| model | test | hearth t/s | llama.cpp t/s | candle t/s | hearth/llama.cpp | hearth/candle |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['model']} | {r['test']} | {r['hearth_ts']:.1f} | {r['llama_cpp_ts']:.1f} | {r['candle_transformers_ts']:.1f} | {r['hearth_over_llama_cpp']:.2f} | {r['hearth_over_candle']:.2f} |")
print(f"wrote {out}")
PY
