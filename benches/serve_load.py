"""A load generator for `hearth serve` (or any OpenAI-compatible server): B clients at once,
each streaming R chat completions (greedy) of prompts from a fixed set, one after another.
First every prompt is answered alone; then, under load, every answer must be complete and
identical to its answer alone. Prints one JSON row per B: requests, errors (by status; 599: a
stream cut short), mismatches, generated tokens/s over the whole run, and p50/p99 of the time
to first token.

    python3 benches/serve_load.py BASE_URL B[,B...] [REQUESTS_PER_CLIENT] [MAX_TOKENS]

benches/serve-load.sh starts the server on the real test GGUF and runs this."""

import http.client
import json
import sys
import threading
import time
import urllib.parse

base, widths = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
per_client = int(sys.argv[3]) if len(sys.argv) > 3 else 2
max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 32
url = urllib.parse.urlparse(base)
TOPICS = ["rivers", "prime numbers", "the moon", "sorting", "tea", "volcanoes", "chess", "bread",
          "rain", "bridges", "owls", "copper", "jazz", "glaciers", "maps", "bees"]
PROMPTS = [f"In two sentences, tell me something about {t}." for t in TOPICS]


def ask(prompt):
    """Streams one answer: (status, text, seconds to the first token, tokens)."""
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", url.path.rstrip("/") + "/chat/completions", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        resp.read()
        return resp.status, None, None, 0
    text, first, done, tokens = "", None, False, 0
    for line in resp:
        line = line.strip()
        if line == b"data: [DONE]":
            done = True
            break
        if not line.startswith(b"data: "):
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            return 500, None, None, 0
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if not chunk.get("choices"):
            continue
        delta = chunk["choices"][0]["delta"].get("content") or ""
        if delta and first is None:
            first = time.perf_counter() - start
        text += delta
    return (200 if done else 599), text, first, tokens


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else None


alone = {p: ask(p)[1] for p in PROMPTS}
rows = []
for b in widths:
    results = []
    lock = threading.Lock()

    def client(i):
        for r in range(per_client):
            prompt = PROMPTS[(i * per_client + r) % len(PROMPTS)]
            status, text, ttft, tokens = ask(prompt)
            with lock:
                results.append((prompt, status, text, ttft, tokens))

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ok = [r for r in results if r[1] == 200]
    errors = {}
    for r in results:
        if r[1] != 200:
            errors[str(r[1])] = errors.get(str(r[1]), 0) + 1
    ttfts = [r[3] for r in ok if r[3] is not None]
    rows.append({
        "clients": b, "requests": len(results), "errors": errors,
        "mismatches": sum(1 for r in ok if r[2] != alone[r[0]]),
        "wall_s": round(wall, 2), "requests_per_s": round(len(ok) / wall, 2),
        "tokens_per_s": round(sum(r[4] for r in ok) / wall, 1),
        "ttft_p50_s": round(pct(ttfts, 50), 3) if ttfts else None,
        "ttft_p99_s": round(pct(ttfts, 99), 3) if ttfts else None,
    })
    print(json.dumps(rows[-1]), flush=True)
