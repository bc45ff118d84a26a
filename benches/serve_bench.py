"""Generation through `hearth serve` as clients see it: B clients at once, each streaming a
completion of a fresh pp-token prompt (token ids) for tg tokens (`ignore_eos`), timed on the
client side the way `hearth bench --concurrency` times the engine in process: decoding runs
from the moment every client has its first token to the moment the last one finishes.
Prints JSON rows. Usage: serve_bench.py BASE_URL VOCAB PP TG B[,B...] [REPS]"""

import http.client
import json
import sys
import threading
import time
import urllib.parse

base, vocab, pp, tg, widths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
reps = int(sys.argv[6]) if len(sys.argv) > 6 else 3
url = urllib.parse.urlparse(base)
salt = [1000]


def prompt():
    salt[0] += 1
    return [(i * 7919 + salt[0] * 104729 + 13) % (vocab - 1) for i in range(pp)]


def one(ids, out):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    body = json.dumps({"prompt": ids, "max_tokens": tg, "ignore_eos": True, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", url.path.rstrip("/") + "/completions", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    first = last = None
    tokens = 0
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        now = time.perf_counter()
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        elif chunk["choices"][0]["finish_reason"] is not None:
            last = now
        elif first is None:
            first = now
    out.append({"start": start, "first": first, "last": last, "tokens": tokens})


def batch(b):
    out = []
    threads = [threading.Thread(target=one, args=(prompt(), out)) for _ in range(b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_tg = max(r["last"] for r in out) - max(r["first"] for r in out)
    assert all(r["tokens"] == tg for r in out), out
    return {"b": b, "pp": pp, "tg": tg, "t_tg": t_tg, "s_tg": b * (tg - 1) / t_tg,
            "ttft_s": max(r["first"] - r["start"] for r in out)}


rows = []
for b in map(int, widths.split(",")):
    batch(b)  # warm-up
    rows.append(min((batch(b) for _ in range(reps)), key=lambda r: r["t_tg"]))
print(json.dumps(rows, indent=1))
