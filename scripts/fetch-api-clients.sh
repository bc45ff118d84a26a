#!/usr/bin/env bash
# Installs the official `openai` and `anthropic` Python clients into a virtual environment
# outside the repository, for the tests that drive `hearth serve` with them. Prints the
# Python to use.
#
#   HEARTH_API_PYTHON=$(scripts/fetch-api-clients.sh) cargo test --test serve_api_clients
set -euo pipefail
venv=${HEARTH_CACHE:-$HOME/.cache/hearth}/venv-clients
openai=3.57.0
anthropic=2.17.0
if ! "$venv/bin/python" -c "import openai, anthropic, sys; sys.exit(openai.__version__ != '$openai' or anthropic.__version__ != '$anthropic')" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet "openai==$openai" "anthropic==$anthropic" >&2
fi
echo "$venv/bin/python"
