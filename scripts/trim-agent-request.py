#!/usr/bin/env python3
"""Makes a recorded agent request small enough to commit as a test's input.

    scripts/trim-agent-request.py LOG.jsonl INDEX OUT.json

LOG.jsonl is what scripts/agent-proxy.py wrote (or a line with the body under "body" or, as
a JSON string, under "b"); INDEX picks the request. Prose is cut to its first 160
characters (system prompts, messages, tool descriptions); everything that shapes the
request is kept as sent: the fields, roles, content block and item types, tool types and
names, and every tool's schema whole.
"""

import json
import sys

LIMIT = 160
PROSE = {"text", "description", "instructions", "content", "output", "system", "thinking"}


def trim(v, key=None, in_schema=False):
    if isinstance(v, dict):
        schema_here = in_schema or key in ("parameters", "input_schema")
        return {k: trim(x, k, schema_here) for k, x in v.items()}
    if isinstance(v, list):
        return [trim(x, key, in_schema) for x in v]
    if isinstance(v, str) and key in PROSE and len(v) > LIMIT:
        # Schemas keep their words too: a description there is short and part of the shape.
        if in_schema and key == "description" and len(v) < 1000:
            return v
        return v[:LIMIT] + "…"
    return v


log, index, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
entry = json.loads(open(log).read().splitlines()[index])
body = entry.get("body")
if body is None:
    body = json.loads(entry["b"])
req = {"method": entry.get("method", entry.get("m")), "path": entry.get("path", entry.get("p")), "body": trim(body)}
with open(out, "w") as f:
    json.dump(req, f, indent=1, ensure_ascii=False)
    f.write("\n")
