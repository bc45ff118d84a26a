#!/usr/bin/env bash
# Installs what the chat page's browser test needs: Debian's Chromium and ChromeDriver (apt),
# and Selenium in a virtual environment outside the repository. Prints the Python to use.
#
#   HEARTH_BROWSER_PYTHON=$(scripts/fetch-browser.sh) cargo test --test serve_page
set -euo pipefail
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update >&2
  "${sudo[@]}" apt-get install -y --no-install-recommends chromium chromium-driver >&2
fi
venv=${HEARTH_CACHE:-$HOME/.cache/hearth}/venv-browser
selenium=4.51.0
if ! "$venv/bin/python" -c "import selenium, sys; sys.exit(selenium.__version__ != '$selenium')" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet "selenium==$selenium" >&2
fi
echo "$venv/bin/python"
