#!/usr/bin/env bash
# Installs the MCP servers the MCP tests run, outside the repository: mcp-server-time and
# mcp-server-git from PyPI (a virtual environment), and the filesystem, memory and everything
# servers of @modelcontextprotocol from npm. Prints the directory that holds them:
#   DIR/venv/bin/mcp-server-time, DIR/venv/bin/mcp-server-git,
#   DIR/node_modules/.bin/mcp-server-filesystem, …-memory, …-everything
#
#   HEARTH_MCP_SERVERS=$(scripts/fetch-mcp-servers.sh) cargo test --test mcp_servers
set -euo pipefail
dir=${HEARTH_CACHE:-$HOME/.cache/hearth}/mcp-servers
py=2026.10.19
npm_version=2026.8.31
mkdir -p "$dir"
if ! "$dir/venv/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(any(m.version(p) != '$py' for p in ('mcp-server-time', 'mcp-server-git')))" 2>/dev/null; then
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install --quiet "mcp-server-time==$py" "mcp-server-git==$py" >&2
fi
packages=()
for p in server-filesystem server-memory server-everything; do
  if [ "$(node -p "require('$dir/node_modules/@modelcontextprotocol/$p/package.json').version" 2>/dev/null)" != "$npm_version" ]; then
    packages+=("@modelcontextprotocol/$p@$npm_version")
  fi
done
if [ ${#packages[@]} -gt 0 ]; then
  if ! command -v npm >/dev/null; then
    if [ "$(id -u)" = 0 ]; then apt-get update >&2 && apt-get install -y nodejs npm >&2
    else echo "fetch-mcp-servers: npm is needed (apt-get install nodejs npm)" >&2; exit 1; fi
  fi
  (cd "$dir" && [ -f package.json ] || echo '{"private": true}' > "$dir/package.json")
  npm install --prefix "$dir" --no-audit --no-fund --silent "${packages[@]}" >&2
fi
echo "$dir"
