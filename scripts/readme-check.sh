#!/usr/bin/env bash
# Runs the shell blocks of README.md that are marked for CI: every ```sh block whose fence
# line directly follows a line `<!-- runnable -->`. Each block runs on its own, from the
# repository root, with `bash -e`, after `cargo run --release` in it has become `cargo run`
# (CI builds the debug profile only, and a block never builds a second one). The block is
# printed before it runs; the first block that fails stops the check, naming its line.
#
#   scripts/readme-check.sh            # run every runnable block
#   scripts/readme-check.sh --list     # only print them, with their line numbers
#   scripts/readme-check.sh [--list] FILE.md
#
# The blocks expect the test data of scripts/fetch-tokenizers.sh and
# scripts/fetch-test-models.sh to be in place; HF_HUB_OFFLINE=1 keeps them off the hub.
set -euo pipefail
cd "$(dirname "$0")/.."

list=0
file=README.md
for arg in "$@"; do
  case "$arg" in
    --list) list=1 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "readme-check: unknown option $arg (usage: $0 [--list] [FILE.md])" >&2; exit 2 ;;
    *) file=$arg ;;
  esac
done
[ -f "$file" ] || { echo "readme-check: no such file: $file" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One file per block, named by the line of its first command: $tmp/NNNNNN.sh.
python3 - "$file" "$tmp" <<'PY'
import pathlib, re, sys

path, out = sys.argv[1], pathlib.Path(sys.argv[2])
lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
marker = "<!-- runnable -->"
i, found = 0, 0
while i < len(lines):
    if lines[i].strip() != marker:
        i += 1
        continue
    fence = i + 1
    if fence >= len(lines) or lines[fence].strip() != "```sh":
        sys.exit(f"{path}:{i + 1}: {marker} is not directly followed by a ```sh fence")
    body, j = [], fence + 1
    while j < len(lines) and lines[j].strip() != "```":
        body.append(lines[j])
        j += 1
    if j == len(lines):
        sys.exit(f"{path}:{fence + 1}: the runnable block is never closed")
    text = "\n".join(body) + "\n"
    text = re.sub(r"cargo run --release\b", "cargo run", text)
    if "--release" in text or re.search(r"\bcargo (bench|build)\b", text):
        sys.exit(f"{path}:{fence + 2}: a runnable block may only build with `cargo run` "
                 "(debug profile): it names --release, cargo build or cargo bench")
    if not text.strip():
        sys.exit(f"{path}:{fence + 1}: the runnable block is empty")
    (out / f"{fence + 2:06d}.sh").write_text(text, encoding="utf-8")
    found += 1
    i = j + 1
if found == 0:
    sys.exit(f"{path}: no runnable blocks ({marker} before a ```sh fence)")
PY

export HF_HUB_OFFLINE=1
blocks=("$tmp"/*.sh)
n=0
for block in "${blocks[@]}"; do
  n=$((n + 1))
  line=$((10#$(basename "$block" .sh)))
  echo "── $file:$line (block $n of ${#blocks[@]})"
  sed 's/^/   /' "$block"
  [ "$list" = 1 ] && continue
  start=$(date +%s)
  status=0
  bash -e "$block" || status=$?
  if [ "$status" != 0 ]; then
    echo "readme-check: FAILED: the block at $file:$line exited with $status" >&2
    exit 1
  fi
  echo "── ok ($(( $(date +%s) - start )) s)"
done
[ "$list" = 1 ] || echo "readme-check: all ${#blocks[@]} runnable blocks of $file passed"
