#!/usr/bin/env bash
# Differential test of hearth-graph against agent-contracts 0.6.0 (PyPI): seeded random
# contract sets, states, LLM behaviours, contract diffs and sanitiser inputs through both;
# fails on any disagreement.
#   scripts/graph-diff.sh                  # 300 cases of each kind, seed 17 (CI)
#   scripts/graph-diff.sh --cases 5000 --seed 3
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hearth-target}"
venv="${HEARTH_CACHE:-$HOME/.cache/hearth}/venv-agent-contracts"
if ! "$venv/bin/python" -c 'import agent_contracts' 2>/dev/null \
    || [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("agent-contracts"))')" != 0.6.0 ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet agent-contracts==0.6.0
fi
cargo build --quiet -p hearth-graph --example graph_diff
cargo build --quiet --bin hearth
exec "$venv/bin/python" scripts/graph_diff.py \
    --rust "$CARGO_TARGET_DIR/debug/examples/graph_diff" \
    --hearth "$CARGO_TARGET_DIR/debug/hearth" "$@"
