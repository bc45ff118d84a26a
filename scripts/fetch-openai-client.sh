#!/usr/bin/env bash
# Installs the official `openai` Python client into a virtual environment outside the
# repository, for the tests that drive `hearth serve` with it. Prints the Python to use.
#
#   HEARTH_OPENAI_PYTHON=$(scripts/fetch-openai-client.sh) cargo test --test serve_openai_client
set -euo pipefail
venv=${HEARTH_CACHE:-$HOME/.cache/hearth}/venv-openai
version=3.57.0
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$version')" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet "openai==$version" >&2
fi
echo "$venv/bin/python"
