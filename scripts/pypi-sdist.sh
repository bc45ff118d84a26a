#!/usr/bin/env bash
# Downloads the source distribution NAME-VERSION.tar.gz from PyPI (found through its simple
# index, checked against the sha256 the index gives) to OUT. For the scripts that take
# llama.cpp's sources and test data from the llama-cpp-python sdist.
#
#   scripts/pypi-sdist.sh NAME VERSION OUT
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 NAME VERSION OUT" >&2; exit 2; }
python3 - "$@" <<'PY'
import hashlib, re, sys, urllib.request
name, version, out = sys.argv[1:]
html = urllib.request.urlopen(f"https://pypi.org/simple/{name}/").read().decode()
file = f"{name.replace('-', '_')}-{version}.tar.gz"
url = re.search(r'href="([^"]*' + re.escape(file) + r')#sha256=([0-9a-f]+)', html)
if not url:
    sys.exit(f"{file} is not on PyPI's index of {name}")
data = urllib.request.urlopen(url.group(1)).read()
if hashlib.sha256(data).hexdigest() != url.group(2):
    sys.exit(f"sha256 mismatch for {file}")
open(out, "wb").write(data)
PY
