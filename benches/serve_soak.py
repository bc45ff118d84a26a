"""A soak run of `hearth serve`: C clients for M minutes, each sending a random mix of streamed
and whole chat completions, forced tool calls, JSON-schema answers, raw completions and
streams it drops after the first chunk. Every 30 s it samples the server's resident memory
(/proc/PID/status) and its KV cache (/health). At the end it waits for the server to go idle
and prints one JSON object: requests and errors by kind, the samples, and the growth of RSS and
of the KV cache from the first sample after warm-up to the end.

    python3 benches/serve_soak.py BASE_URL PID [MINUTES] [CLIENTS]

benches/serve-soak.sh starts the server on the real test GGUF and runs this."""

import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

base, pid = sys.argv[1], int(sys.argv[2])
minutes = float(sys.argv[3]) if len(sys.argv) > 3 else 30
clients = int(sys.argv[4]) if len(sys.argv) > 4 else 8
url = urllib.parse.urlparse(base)
root = url.path.rstrip("/")
WEATHER = {"type": "function", "function": {"name": "weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}}
PERSON = {"type": "json_schema", "json_schema": {"name": "person", "schema": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"], "additionalProperties": False}}}
TOPICS = ["rivers", "tea", "owls", "copper", "jazz", "maps", "bees", "rain"]


def body(kind, rng):
    topic = rng.choice(TOPICS)
    chat = {"messages": [{"role": "user", "content": f"Tell me about {topic}."}],
            "max_tokens": rng.choice([8, 16, 32]), "temperature": rng.choice([0, 0.7])}
    if kind == "tools":
        chat["messages"][0]["content"] = f"What is the weather where {topic} are found?"
        chat |= {"tools": [WEATHER], "tool_choice": "required", "max_tokens": 48}
    elif kind == "json":
        chat["messages"][0]["content"] = f"Invent a person who likes {topic}, as JSON."
        chat |= {"response_format": PERSON, "max_tokens": 96}
    elif kind == "completion":
        return "/completions", {"prompt": f"A short note on {topic}:", "max_tokens": 16}
    if kind in ("stream", "cancel"):
        chat["stream"] = True
    return "/chat/completions", chat


def ask(kind, rng):
    """One request; True when it got what it asked for."""
    path, payload = body(kind, rng)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
    try:
        conn.request("POST", root + path, json.dumps(payload), {"content-type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return False
        if not payload.get("stream"):
            answer = json.loads(resp.read())
            if kind == "tools":
                return bool(answer["choices"][0]["message"].get("tool_calls"))
            if kind == "json":
                choice = answer["choices"][0]
                if choice["finish_reason"] == "length":
                    return True  # cut at max_tokens, as asked: no whole object to check
                person = json.loads(choice["message"]["content"])
                return isinstance(person.get("age"), int)
            return "choices" in answer
        for line in resp:
            if kind == "cancel" and line.startswith(b"data: "):
                return True  # closes the connection mid-stream
            if line.strip() == b"data: [DONE]":
                return True
        return False
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return False
    finally:
        conn.close()


def health():
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", "/health")
    h = json.loads(conn.getresponse().read())
    conn.close()
    return h


def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


KINDS = ["whole", "stream", "tools", "json", "completion", "cancel"]
counts = {k: [0, 0] for k in KINDS}  # requests, errors
lock = threading.Lock()
end = time.monotonic() + minutes * 60


def client(i):
    rng = random.Random(i)
    while time.monotonic() < end:
        kind = rng.choice(KINDS)
        ok = ask(kind, rng)
        with lock:
            counts[kind][0] += 1
            counts[kind][1] += 0 if ok else 1


start = time.monotonic()
threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
for t in threads:
    t.start()
samples = []
while any(t.is_alive() for t in threads):
    h = health()
    samples.append({"t_s": round(time.monotonic() - start), "rss_kib": rss_kib(),
                    "kv_bytes": h["kv_cache"]["bytes"], "running": h["running"],
                    "waiting": h["waiting"]})
    for t in threads:
        t.join(timeout=30 / len(threads))
while health()["running"] or health()["waiting"]:
    time.sleep(0.5)
h = health()
samples.append({"t_s": round(time.monotonic() - start), "rss_kib": rss_kib(),
                "kv_bytes": h["kv_cache"]["bytes"], "running": 0, "waiting": 0, "idle": True})
warm = next((s for s in samples if s["t_s"] >= min(120, minutes * 60 / 4)), samples[0])
print(json.dumps({
    "minutes": minutes, "clients": clients,
    "requests": {k: v[0] for k, v in counts.items()},
    "errors": {k: v[1] for k, v in counts.items()},
    "rss_kib_after_warmup": warm["rss_kib"], "rss_kib_end": samples[-1]["rss_kib"],
    "rss_kib_max": max(s["rss_kib"] for s in samples),
    "kv_bytes_after_warmup": warm["kv_bytes"], "kv_bytes_end_idle": samples[-1]["kv_bytes"],
    "kv_bytes_max": max(s["kv_bytes"] for s in samples),
    "samples": samples,
}, indent=1))
