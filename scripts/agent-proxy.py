#!/usr/bin/env python3
"""A logging pass-through proxy between a coding agent and `hearth serve`.

    scripts/agent-proxy.py LISTEN_PORT UPSTREAM_PORT LOG.jsonl

LISTEN_PORT 0 picks a free port; the port is printed on stdout once listening. Every request
is forwarded unchanged to 127.0.0.1:UPSTREAM_PORT and its answer streamed
back; one JSON line per request goes to LOG.jsonl: method, path, status, the request body,
when it started (`start`, Unix seconds), the seconds to its first streamed delta (`ttft`) and
to its end (`seconds`), the answer's last `usage` object where it has one (`usage`),
`aborted` where the agent left before the answer ended, and for an error status the answer's
body (`answer`). Used to record what the agents send
(tests/data/coding-agents/) and by tests/coding_agents.rs to check every request was 2xx.
"""

import http.client
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LISTEN, UPSTREAM, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
# A streamed event that carries generated text or a call (not the opening ones).
DELTA = re.compile(
    rb'"type"\s*:\s*"(content_block_delta|response\.output_text\.delta|response\.output_item\.added|'
    rb'response\.reasoning_text\.delta|response\.function_call_arguments\.delta)"'
    rb'|"delta"\s*:\s*\{[^}]*("(content|reasoning_content)"\s*:\s*"[^"]|"tool_calls"\s*:\s*\[)'
)


def last_usage(answer):
    """The last `usage` object of an answer, streamed (SSE `data:` lines) or whole, merged
    over the events that carry one (Anthropic's input counts come first, output last)."""
    usage = {}
    texts = [l[5:].strip() for l in answer.split("\n") if l.startswith("data:")] or [answer]
    for t in texts:
        try:
            v = json.loads(t)
        except ValueError:
            continue
        for holder in (v, v.get("message") or {}, v.get("response") or {}):
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                usage.update(holder["usage"])
    return usage or None


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        start = time.time()
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=3600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        up.request(self.command, self.path, body=body, headers=headers)
        r = up.getresponse()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        kept = b""
        ttft = None
        aborted = False
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
            if not chunk:
                break
            if ttft is None and DELTA.search(chunk):
                ttft = time.time() - start
            # The answer is kept for its usage (a long one: its end, where usage comes).
            kept = (kept + chunk)[-(1 << 20):]
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                # The agent left (its own timeout): the server's answer is cut off with it.
                aborted = True
                up.close()
                break
        if not aborted:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                aborted = True
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode("utf-8", "replace")
        answer = kept.decode("utf-8", "replace")
        entry = {
            "method": self.command,
            "path": self.path,
            "status": r.status,
            "start": start,
            "ttft": ttft,
            "seconds": time.time() - start,
            "usage": last_usage(answer),
            "body": parsed,
        }
        if aborted:
            entry["aborted"] = True
        if r.status >= 400:
            entry["answer"] = answer[:65536]
        with lock, open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = forward


server = ThreadingHTTPServer(("127.0.0.1", LISTEN), Proxy)
print(server.server_address[1], flush=True)
server.serve_forever()
