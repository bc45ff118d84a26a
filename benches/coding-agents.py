#!/usr/bin/env python3
"""The coding agents on a local model: each agent's task loop against `hearth serve`, timed.

    benches/coding-agents.py MODEL [--agents claude,codex,qwen,opencode] [--runs N]
                             [--hearth PATH] [--out FILE.json] [--max-turns N]

Starts `hearth serve --model MODEL`, then runs each agent headless through `hearth launch
AGENT --url` behind scripts/agent-proxy.py, in a fresh folder, on the task "Create a file
named hello.py that prints hello world". Per agent and run it records every request (status,
prompt tokens, cached tokens, time to first token, seconds), the agent's exit, whether a tool's
result went back to the model, and whether the task was done (hello.py exists and `python3
hello.py` prints hello world, punctuation aside), and after the run what the server's KV cache holds (`/health`:
bytes the run added, now and at peak, beside one copy of the run's longest prompt). Prints a table (time to
first token of turn 1, the median of turns 2-10, the cached share of turns 2-10, turns, KV
held ÷ one longest prompt, done) and writes the records as JSON
(default benches/results/<date>-coding-agents-<model>.json). The agents come from
scripts/fetch-coding-agents.sh; HEARTH_CODING_AGENTS names their folder.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = "Create a file named hello.py that prints hello world"
ARGS = {
    "claude": lambda turns: ["-p", TASK, "--dangerously-skip-permissions", "--max-turns", str(turns)],
    "codex": lambda turns: ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK],
    "qwen": lambda turns: ["-p", TASK, "--yolo", "--max-session-turns", str(turns)],
    "opencode": lambda turns: ["run", TASK],
}


def usage_counts(u):
    """(prompt tokens, cached tokens) of any API's usage object."""
    if not u:
        return None, None
    if "input_tokens" in u and "cache_read_input_tokens" in u:  # Anthropic: input excludes cached
        cached = u.get("cache_read_input_tokens") or 0
        return (u.get("input_tokens") or 0) + cached, cached
    if "input_tokens" in u:  # Responses
        return u["input_tokens"], (u.get("input_tokens_details") or {}).get("cached_tokens", 0)
    return u.get("prompt_tokens"), (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def sends_tool_result(body):
    body = body or {}
    for m in body.get("messages") or []:
        if m.get("role") == "tool":
            return True
        c = m.get("content")
        if isinstance(c, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in c):
            return True
    return any(isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output")
               for i in body.get("input") or [])


def run_agent(hearth, agents, upstream, agent, turns, limit):
    work = Path(tempfile.mkdtemp(prefix=f"hearth-{agent}-")) / "project"
    work.mkdir()
    home = Path(tempfile.mkdtemp(prefix=f"hearth-{agent}-home-"))
    log = home / "requests.jsonl"
    proxy = subprocess.Popen([sys.executable, ROOT / "scripts/agent-proxy.py", "0", upstream, log],
                             stdout=subprocess.PIPE, text=True)
    port = proxy.stdout.readline().strip()
    env = dict(os.environ, PWD=str(work), HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local/share"), XDG_STATE_HOME=str(home / ".local/state"),
               HEARTH_CODING_AGENTS=str(agents), IS_SANDBOX="1", NO_COLOR="1")
    if agent == "opencode":  # `opencode run` refuses what would need asking
        (work / "opencode.json").write_text(
            '{"permission": {"edit": "allow", "bash": "allow", "external_directory": "allow"}}')
    start = time.time()
    try:
        out = subprocess.run([hearth, "launch", agent, "--url", f"http://127.0.0.1:{port}", "--model", "qwen",
                              "--"] + ARGS[agent](turns), cwd=work, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=limit)
        code, text = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        code, text = None, f"timed out after {limit} s: {e}"
    seconds = time.time() - start
    proxy.kill()
    requests = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
    hello = work / "hello.py"
    done = False
    if hello.exists():
        r = subprocess.run([sys.executable, hello], capture_output=True, text=True, timeout=30)
        # "Hello, world!" counts: letters and spaces only.
        done = "hello world" in re.sub(r"[^a-z ]", "", r.stdout.lower())
    turns_log = []
    for r in requests:
        if r["method"] != "POST":
            continue
        prompt, cached = usage_counts(r.get("usage"))
        turns_log.append({"path": r["path"], "status": r["status"], "prompt_tokens": prompt,
                          "cached_tokens": cached, "ttft": r.get("ttft"), "seconds": r.get("seconds")})
    return {"agent": agent, "exit": code, "seconds": seconds, "done": done,
            "tool_result_sent": any(sends_tool_result(r.get("body")) for r in requests),
            "all_2xx": all(200 <= r["status"] < 300 for r in requests),
            "requests": turns_log, "output_tail": text[-2000:]}


def kv_held(upstream):
    with urllib.request.urlopen(f"http://127.0.0.1:{upstream}/health", timeout=30) as r:
        return json.load(r)["kv_cache"]


def summary(run):
    posts = [r for r in run["requests"] if r["prompt_tokens"]]
    first = posts[0] if posts else {}
    later = posts[1:10]
    ttfts = [r["ttft"] for r in later if r["ttft"] is not None]
    prompt = sum(r["prompt_tokens"] for r in later)
    cached = sum(r["cached_tokens"] or 0 for r in later)
    return {"turn1_tokens": first.get("prompt_tokens"), "turn1_ttft": first.get("ttft"),
            "later_ttft_median": statistics.median(ttfts) if ttfts else None,
            "later_cached_share": cached / prompt if prompt else None, "turns": len(posts),
            "longest_prompt": max((r["prompt_tokens"] for r in posts), default=None)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--agents", default="claude,codex,qwen,opencode")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--max-turns", type=int, default=10)
    p.add_argument("--limit", type=int, default=3600, help="seconds one agent's run may take")
    p.add_argument("--hearth", default=os.environ.get("HEARTH_BIN", "target/release/hearth"))
    p.add_argument("--out")
    a = p.parse_args()
    agents = os.environ.get("HEARTH_CODING_AGENTS") or subprocess.run(
        [ROOT / "scripts/fetch-coding-agents.sh"], capture_output=True, text=True, check=True).stdout.strip()
    server = subprocess.Popen([a.hearth, "serve", "--model", a.model, "--port", "0"],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    upstream = None
    position_kib = None
    for line in server.stderr:
        if "KiB per position" in line:
            position_kib = float(line.split("KV cache: ")[1].split(" KiB")[0])
        if "listening on http://" in line:
            upstream = line.split("listening on http://")[1].strip().rsplit(":", 1)[1]
            break
    if upstream is None:
        sys.exit("hearth serve did not start")
    # The server logs every request: keep reading, or it stops when the pipe is full.
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    runs = []
    try:
        for agent in a.agents.split(","):
            for i in range(a.runs):
                before = kv_held(upstream)
                run = run_agent(a.hearth, agents, upstream, agent, a.max_turns, a.limit)
                run["summary"] = summary(run)
                # What this run added (the server keeps the earlier runs' caches).
                run["kv_cache"] = kv_held(upstream)
                run["kv_cache"]["bytes_before"] = before["bytes"]
                longest = run["summary"]["longest_prompt"]
                if position_kib and longest:
                    one = longest * position_kib * 1024
                    run["kv_cache"]["one_longest_prompt_bytes"] = one
                    run["summary"]["kv_held_per_prompt"] = (run["kv_cache"]["bytes"] - before["bytes"]) / one
                    run["summary"]["kv_peak_per_prompt"] = (run["kv_cache"]["peak_bytes"] - before["bytes"]) / one
                runs.append(run)
                s = run["summary"]
                print(f"{agent} #{i + 1}: exit {run['exit']}, 2xx {run['all_2xx']}, tool result sent "
                      f"{run['tool_result_sent']}, done {run['done']}, {s}", flush=True)
    finally:
        server.kill()
    cpu = subprocess.run(["bash", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                         capture_output=True, text=True).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "model": a.model, "cpu": cpu, "task": TASK,
              "kv_kib_per_position": position_kib, "runs": runs}
    out = a.out or ROOT / "benches/results" / f"{result['date']}-coding-agents-{Path(a.model).stem}.json"
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print("| agent | turn 1 tokens | TTFT turn 1 (s) | median TTFT turns 2-10 (s) | cached share 2-10 | turns "
          "| KV held (peak) ÷ longest prompt | done |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        s = run["summary"]
        f = lambda v, d=1: "-" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
        print(f"| {run['agent']} | {f(s['turn1_tokens'])} | {f(s['turn1_ttft'])} | {f(s['later_ttft_median'])} "
              f"| {f(s['later_cached_share'], 2)} | {s['turns']} "
              f"| {f(s.get('kv_held_per_prompt'), 2)} ({f(s.get('kv_peak_per_prompt'), 2)}) | {run['done']} |")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
