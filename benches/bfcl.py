"""Function calling on the Berkeley Function Calling Leaderboard's cases (the `bfcl-eval` wheel's
data: fetched with `pip download --no-deps`, read from the zip, never installed), through
`hearth serve` with the model greedy: tool calls decoded under the tool-call grammar
("constrained") and left free ("free", `--free-tool-calls`). Answers are checked the way BFCL's
AST checker checks them: the function's name, required parameters present, each value among the
allowed ones ("" meaning it may be left out, an int accepted for a float, strings compared
without case, spaces and punctuation), parallel calls matched in any order, irrelevance passed
by making no call. A call that does not parse, or names a function not offered, or text that
tries to write a call, is malformed; such an attempt cut by `max_tokens` (finish reason
`length`) is counted as truncated instead (both count as wrong).

  python benches/bfcl.py HEARTH_BIN MODEL [--cases N] [--categories simple_python,multiple,parallel,irrelevance]
                         [--modes constrained,free] [--clients 4] [--out benches/results/DATE-bfcl.json]
                         [--details] [--ids multiple_90,multiple_152]
"""

import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request
import zipfile

CACHE = pathlib.Path(os.environ.get("HEARTH_CACHE", pathlib.Path.home() / ".cache/hearth")) / "bfcl"
TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
         "integer": "integer", "string": "string", "boolean": "boolean", "bool": "boolean",
         "array": "array", "number": "number", "object": "object"}


def wheel():
    found = glob.glob(str(CACHE / "bfcl_eval-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "bfcl-eval", "-d", str(CACHE)], check=True)
        found = glob.glob(str(CACHE / "bfcl_eval-*.whl"))
    return zipfile.ZipFile(sorted(found)[-1])


def schema(p):
    """BFCL's parameter types as JSON Schema."""
    if not isinstance(p, dict):
        return p
    out = {}
    for k, v in p.items():
        if k == "type":
            out[k] = TYPES.get(v, "string") if v != "any" else None
        elif k == "properties":
            out[k] = {n: schema(s) for n, s in v.items()}
        elif k == "items":
            out[k] = schema(v)
        elif k in ("description", "required", "enum", "default"):
            out[k] = v
    if out.get("type") is None:
        out.pop("type", None)
    return out


def tools(functions):
    return [{"type": "function", "function": {"name": f["name"], "description": f.get("description", ""),
                                              "parameters": schema(f["parameters"])}} for f in functions]


def norm(v):
    if isinstance(v, str):
        return re.sub(r"[ ,./\-_*^]", "", v).lower()
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def value_ok(got, allowed):
    for a in allowed:
        if a == "":
            continue
        if isinstance(a, float) and isinstance(got, int) and not isinstance(got, bool) and float(got) == a:
            return True
        if isinstance(a, (list, tuple)) and isinstance(got, (list, tuple)) and norm(list(got)) == norm(list(a)):
            return True
        if type(got) is type(a) or (isinstance(a, float) and isinstance(got, float)):
            if norm(got) == norm(a):
                return True
    return False


def call_ok(call, truth, functions):
    name, allowed = next(iter(truth.items()))
    if call["name"] != name:
        return False
    f = next((f for f in functions if f["name"] == name), None)
    required = f["parameters"].get("required", []) if f else []
    args = call["arguments"]
    if any(r not in args for r in required):
        return False
    for k, v in args.items():
        if k not in allowed or not value_ok(v, allowed[k]):
            return False
    # A parameter left out must be optional ("" among its allowed values).
    return all(k in args or "" in vals for k, vals in allowed.items())


def check(category, calls, truth, functions):
    if category == "irrelevance":
        return not calls
    if len(calls) != len(truth):
        return False
    left = list(truth)
    for c in calls:
        match = next((t for t in left if call_ok(c, t, functions)), None)
        if match is None:
            return False
        left.remove(match)
    return True


def ask(base, case, model):
    body = {"model": model, "messages": case["question"][0], "tools": tools(case["function"]),
            "temperature": 0, "max_tokens": 256}
    req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return {"error": json.loads(e.read() or b"{}")}


def run_mode(hearth, model, mode, cases, clients):
    args = [hearth, "serve", "-m", model, "--port", "0", "--max-seqs", str(clients), "-q"]
    if mode == "free":
        args.append("--free-tool-calls")
    server = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:
            if "listening on http://" in line:
                base = "http://" + line.split("listening on http://")[1].strip() + "/v1"
                break
        else:
            raise SystemExit("the server exited before listening")
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            return list(pool.map(lambda c: ask(base, c[1], "m"), cases))
    finally:
        server.terminate()
        server.wait()


def score(category, case, truth, answer):
    names = {f["name"] for f in case["function"]}
    if "error" in answer:
        return {"ok": False, "malformed": True, "truncated": False, "why": answer["error"].get("error", {}).get("message", "")}
    choice = answer["choices"][0]
    msg = choice["message"]
    calls, malformed = [], False
    for c in msg.get("tool_calls") or []:
        try:
            args = json.loads(c["function"]["arguments"])
        except ValueError:
            malformed = True
            continue
        if c["function"]["name"] not in names or not isinstance(args, dict):
            malformed = True
        calls.append({"name": c["function"]["name"], "arguments": args})
    text = msg.get("content") or ""
    # An attempted call that did not come out as a call.
    if "<tool_call>" in text or re.search(r'\{\s*"name"\s*:', text):
        malformed = True
    ok = not malformed and check(category, calls, truth, case["function"])
    # A call cut by the token limit is unfinished, not malformed (wrong all the same); an
    # answer without a call that the limit cut is just a long answer.
    truncated = malformed and choice.get("finish_reason") == "length"
    return {"ok": ok, "malformed": malformed and not truncated, "truncated": truncated, "calls": calls,
            "text": text[:300]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hearth")
    ap.add_argument("model")
    ap.add_argument("--cases", type=int, default=0, help="first N cases of each category (0: all)")
    ap.add_argument("--categories", default="simple_python,multiple,parallel,irrelevance")
    ap.add_argument("--modes", default="constrained,free")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--out", default=f"benches/results/{datetime.date.today()}-bfcl.json")
    ap.add_argument("--details", action="store_true", help="keep each case's calls and text in the results")
    ap.add_argument("--ids", default="", help="only these case ids, comma-separated (e.g. multiple_90,multiple_152)")
    a = ap.parse_args()
    z = wheel()
    data = {}
    for cat in a.categories.split(","):
        q = [json.loads(l) for l in z.read(f"bfcl_eval/data/BFCL_v4_{cat}.json").decode().splitlines() if l.strip()]
        try:
            t = {json.loads(l)["id"]: json.loads(l)["ground_truth"] for l in
                 z.read(f"bfcl_eval/data/possible_answer/BFCL_v4_{cat}.json").decode().splitlines() if l.strip()}
        except KeyError:
            t = {}
        if a.ids:
            q = [c for c in q if c["id"] in a.ids.split(",")]
        data[cat] = [(cat, c, t.get(c["id"], [])) for c in (q[: a.cases] if a.cases else q)]
    data = {cat: cases for cat, cases in data.items() if cases}
    if not data:
        raise SystemExit("no case matches --categories/--ids")
    results = {"command": " ".join(["python benches/bfcl.py"] + sys.argv[1:]), "wheel": os.path.basename(z.filename),
               "model": os.path.basename(a.model), "modes": {}}
    for mode in a.modes.split(","):
        everything = [c for cat in data for c in data[cat]]
        start = time.time()
        answers = run_mode(a.hearth, a.model, mode, [(x[0], x[1]) for x in everything], a.clients)
        per, details = {}, []
        for (cat, case, truth), ans in zip(everything, answers):
            s = score(cat, case, truth, ans)
            details.append({"id": case["id"], **s})
            p = per.setdefault(cat, {"cases": 0, "correct": 0, "malformed": 0, "truncated": 0})
            p["cases"] += 1
            p["correct"] += s["ok"]
            p["malformed"] += s["malformed"]
            p["truncated"] += s["truncated"]
        for p in per.values():
            p["accuracy"] = round(100 * p["correct"] / p["cases"], 1)
            p["malformed_pct"] = round(100 * p["malformed"] / p["cases"], 1)
            p["truncated_pct"] = round(100 * p["truncated"] / p["cases"], 1)
        results["modes"][mode] = {"seconds": round(time.time() - start, 1), "categories": per}
        if a.details:
            results["modes"][mode]["cases"] = details
        print(mode, json.dumps(per), file=sys.stderr)
    pathlib.Path(a.out).write_text(json.dumps(results, indent=1))
    print("| category | " + " | ".join(f"{m} accuracy | {m} malformed % | {m} truncated %" for m in results["modes"]) + " |")
    print("|---|" + "---|---|---|" * len(results["modes"]))
    for cat in data:
        row = ["{accuracy} | {malformed_pct} | {truncated_pct}".format(**results["modes"][m]["categories"][cat]) for m in results["modes"]]
        print(f"| {cat} | " + " | ".join(row) + " |")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
