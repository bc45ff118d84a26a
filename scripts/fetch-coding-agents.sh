#!/usr/bin/env bash
# Installs the coding agents from npm (pinned) into a folder outside the repository, for the
# tests and benchmarks that run them against `hearth serve`: Claude Code, Codex CLI, Qwen
# Code and OpenCode. Prints the folder whose node_modules/.bin holds `claude`, `codex`,
# `qwen` and `opencode`.
#
#   HEARTH_CODING_AGENTS=$(scripts/fetch-coding-agents.sh) cargo test --test coding_agents
set -euo pipefail
dir=${HEARTH_CODING_AGENTS:-${HEARTH_CACHE:-$HOME/.cache/hearth}/coding-agents}
agents=(@anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 @qwen-code/qwen-code@0.15.10 opencode-ai@1.18.33)
mkdir -p "$dir"
stamp="$dir/.installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "${agents[*]}" ]; then
  (cd "$dir" && { [ -f package.json ] || echo '{"private": true}' > package.json; } \
    && npm install --no-audit --no-fund --loglevel=error "${agents[@]}" >&2)
  echo "${agents[*]}" > "$stamp"
fi
for bin in claude codex qwen opencode; do
  [ -x "$dir/node_modules/.bin/$bin" ] || { echo "$bin did not install into $dir" >&2; exit 1; }
done
echo "$dir"
