#!/usr/bin/env bash
# llama.cpp's own speculative example (llama-speculative: a draft model, greedy) on the edit
# workload of `cargo bench --bench speculative` (the same two "rename X to Y and return the
# file" prompts over benches/data/edit-source.py, in Qwen's chat template), to set beside
# that bench's `draft` column. Prints decode tok/s and acceptance per edit; writes
# benches/results/<date>-llama-speculative-<model>[-avx2].json.
#
#   benches/llama-speculative.sh [--cpu avx2] BIG.gguf SMALL.gguf [threads] [draft length]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
level=native
if [ "${1:-}" = --cpu ]; then level=$2; shift 2; fi
[ $# -ge 2 ] || { echo "usage: $0 [--cpu avx2] BIG.gguf SMALL.gguf [threads] [draft length]" >&2; exit 2; }
model=$1 draft=$2 threads=${3:-2} n_max=${4:-16}
llama=$("$repo/scripts/llama-cpp.sh" --cpu "$level" llama-speculative)/llama-speculative
suffix=""
[ "$level" = avx2 ] && suffix=-avx2
out="$repo/benches/results/$(date +%F)-llama-speculative-$(basename "$model" .gguf)$suffix.json"
python3 - "$llama" "$model" "$draft" "$threads" "$n_max" "$level" "$out" "$repo/benches/data/edit-source.py" <<'PY'
import json, re, subprocess, sys, tempfile
llama, model, draft, threads, n_max, level, out, source = sys.argv[1:]
src = open(source).read()
# The wording of benches/speculative.rs's edit workload.
asks = ["Rename the function `module_of` to `module_path`.", "Rename the variable `targets` to `references`."]
system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
runs = []
for ask in asks:
    user = f"{ask} Return the whole file, nothing else.\n\n```python\n{src}```"
    prompt = f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(prompt)
        f.flush()
        p = subprocess.run([llama, "-m", model, "-md", draft, "-f", f.name, "-n", "1536", "--temp", "0",
                            "-t", threads, "-tb", threads, "-c", "4096", "--spec-draft-n-max", n_max, "-s", "1"],
                           capture_output=True, text=True, check=True)
    log = p.stdout + p.stderr
    num = lambda pat: float(re.search(pat, log).group(1))
    run = {"ask": ask,
           "tokens": int(num(r"decoded\s+(\d+) tokens")),
           "tok_s": num(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+)"),
           "drafted": int(num(r"n_drafted\s*=\s*(\d+)")),
           "accepted": int(num(r"n_accept\s*=\s*(\d+)"))}
    runs.append(run)
    print(f"{ask} {run['tokens']} tokens, {run['tok_s']:.1f} tok/s, {run['accepted']}/{run['drafted']} accepted")
tok = sum(r["tokens"] for r in runs)
secs = sum(r["tokens"] / r["tok_s"] for r in runs)
total = {"tok_s": tok / secs, "acceptance": sum(r["accepted"] for r in runs) / max(1, sum(r["drafted"] for r in runs))}
print(f"llama-speculative, draft length {n_max}, {threads} threads, CPU level {level}: "
      f"{total['tok_s']:.1f} tok/s, {100 * total['acceptance']:.0f} % accepted")
json.dump({"command": " ".join(["benches/llama-speculative.sh"] + (["--cpu", level] if level != "native" else []) + [model, draft, threads, n_max]),
           "cpu_level": level, "threads": int(threads), "draft_max": int(n_max), "total": total, "runs": runs},
          open(out, "w"), indent=2)
print("wrote", out)
PY
