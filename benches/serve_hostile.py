"""A well-behaved client's streamed chat requests, alone and beside hostile clients; prints one
JSON object. Usage: serve_hostile.py HOST:PORT REQUESTS (see benches/serve-hostile.sh).
Each hostile client repeats its attack every 0.2 s (slowloris and endless bodies hold their
connection open as long as the server lets them): what is measured is what slow and malformed
clients cost the others, not a flood, which on the same two cores would measure the load
generator too."""

import json
import socket
import statistics
import sys
import threading
import time
import urllib.request

addr, requests = sys.argv[1], int(sys.argv[2])
host, port = addr.rsplit(":", 1)
port = int(port)
BODY = json.dumps({"messages": [{"role": "user", "content": "Write a haiku about the sea."}],
                   "max_tokens": 32, "temperature": 0, "stream": True}).encode()
stop = threading.Event()
counts = {"slowloris_cut": 0, "endless_bodies": 0, "big_bodies_413": 0, "deep_json_400": 0, "dropped_streams": 0}
lock = threading.Lock()


def count(kind):
    with lock:
        counts[kind] += 1


def victim(n):
    ttft, latency, errors = [], [], 0
    for _ in range(n):
        start = time.perf_counter()
        req = urllib.request.Request(f"http://{addr}/v1/chat/completions", data=BODY,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                first = None
                for line in r:
                    if first is None and line.startswith(b"data: {"):
                        delta = json.loads(line[6:])["choices"][0]["delta"] if b'"choices":[{' in line else {}
                        if delta.get("content"):
                            first = time.perf_counter()
                end = time.perf_counter()
            ttft.append(((first or end) - start) * 1e3)
            latency.append((end - start) * 1e3)
        except Exception:
            errors += 1
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
    return {"requests": n, "errors": errors, "ttft_p50_ms": statistics.median(ttft), "ttft_p99_ms": q(ttft, 0.99),
            "latency_p50_ms": statistics.median(latency), "latency_p99_ms": q(latency, 0.99)}


def connect():
    s = socket.create_connection((host, port), timeout=60)
    s.settimeout(60)
    return s


def slowloris():
    while not stop.is_set():
        try:
            s = connect()
            for b in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000:
                if stop.is_set():
                    break
                s.send(bytes([b]))
                time.sleep(0.5)
        except OSError:
            count("slowloris_cut")
        finally:
            s.close()


def endless_body():
    while not stop.is_set():
        try:
            s = connect()
            s.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 100000\r\n\r\n{")
            while not stop.is_set():
                s.send(b" ")
                time.sleep(1)
        except OSError:
            count("endless_bodies")
        finally:
            s.close()


def post_raw(body, headers=b""):
    s = connect()
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
                  b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        return s.recv(64)
    finally:
        s.close()


def big_bodies():
    body = b'{"messages": "' + b"x" * (40 << 20) + b'"}'
    while not stop.is_set():
        try:
            if b" 413 " in post_raw(body):
                count("big_bodies_413")
        except OSError:
            count("big_bodies_413")  # the server closed while the body still came
        time.sleep(0.2)


def deep_json():
    body = b"[" * 100_000 + b"]" * 100_000
    while not stop.is_set():
        try:
            if b" 400 " in post_raw(body):
                count("deep_json_400")
        except OSError:
            pass
        time.sleep(0.2)


def dropped_streams():
    while not stop.is_set():
        try:
            s = connect()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
            s.recv(512)
            s.close()
            count("dropped_streams")
            time.sleep(0.2)
        except OSError:
            pass


victim(2)  # warm-up
alone = victim(requests)
malformed = ([threading.Thread(target=slowloris, daemon=True) for _ in range(64)]
             + [threading.Thread(target=endless_body, daemon=True) for _ in range(8)]
             + [threading.Thread(target=big_bodies, daemon=True) for _ in range(4)]
             + [threading.Thread(target=deep_json, daemon=True) for _ in range(8)])
for t in malformed:
    t.start()
time.sleep(3)
hostile = victim(requests)
# Then with clients that start real answers and leave: their prefills are real work.
droppers = [threading.Thread(target=dropped_streams, daemon=True) for _ in range(8)]
for t in droppers:
    t.start()
time.sleep(3)
with_drops = victim(requests)
stop.set()
print(json.dumps({
    "requests": requests, "alone": alone, "hostile": hostile, "hostile_and_dropped": with_drops,
    "hostile_clients": len(malformed), "dropping_clients": len(droppers),
    "hostile_counts": dict(counts),
    "ttft_p50_ratio": hostile["ttft_p50_ms"] / alone["ttft_p50_ms"],
    "latency_p50_ratio": hostile["latency_p50_ms"] / alone["latency_p50_ms"],
    "with_drops_ttft_p50_ratio": with_drops["ttft_p50_ms"] / alone["ttft_p50_ms"],
    "with_drops_latency_p50_ratio": with_drops["latency_p50_ms"] / alone["latency_p50_ms"],
}, indent=1))
