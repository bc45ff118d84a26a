"""Sends the workloads of benches/speculative.rs (two code edits of benches/data/edit-source.py,
three chat questions) to an OpenAI-compatible server one at a time, greedy, and prints JSON:
per workload the decode rate each answer's `timings` report (llama-server's fields, which
`hearth serve` also gives), tokens, drafted and accepted tokens, and the answers' texts.

    python3 benches/speculative_serve.py http://127.0.0.1:8080/v1
"""
import json
import pathlib
import sys
import urllib.request

SOURCE = (pathlib.Path(__file__).parent / "data" / "edit-source.py").read_text()


def edit(what):
    return f"{what} Return the whole file, nothing else.\n\n```python\n{SOURCE}```"


WORKLOADS = [
    ("edit", edit("Rename the function `module_of` to `module_path`."), 1536),
    ("edit", edit("Rename the variable `targets` to `references`."), 1536),
    ("chat", "Explain in a paragraph how a hash map handles collisions.", 160),
    ("chat", "Write a short story about a lighthouse keeper, in about 120 words.", 160),
    ("chat", "What are the differences between TCP and UDP? Answer briefly.", 160),
]


def ask(base, prompt, max_tokens):
    body = {
        "model": "any",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "cache_prompt": False,
    }
    req = urllib.request.Request(
        f"{base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.load(r)


def main():
    base = sys.argv[1].rstrip("/")
    ask(base, WORKLOADS[0][1], 64)  # warm-up: a long prompt, some decoding
    runs = []
    for kind, prompt, max_tokens in WORKLOADS:
        r = ask(base, prompt, max_tokens)
        t = r["timings"]
        runs.append({
            "workload": kind,
            "tokens": t["predicted_n"],
            "decode_ms": t["predicted_ms"],
            "tok_s": t["predicted_per_second"],
            "drafted": t.get("draft_n", 0),
            "accepted": t.get("draft_n_accepted", 0),
            "text": r["choices"][0]["message"]["content"],
        })
    totals = {}
    for kind in ("edit", "chat"):
        rs = [r for r in runs if r["workload"] == kind]
        n = sum(r["tokens"] for r in rs)
        ms = sum(r["decode_ms"] for r in rs)
        drafted = sum(r["drafted"] for r in rs)
        totals[kind] = {
            "tokens": n,
            "tok_s": n / (ms / 1e3) if ms else 0.0,
            "drafted": drafted,
            "acceptance": sum(r["accepted"] for r in rs) / drafted if drafted else None,
        }
    print(json.dumps({"totals": totals, "runs": runs}))


if __name__ == "__main__":
    main()
