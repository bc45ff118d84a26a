"""Differential test: hearth-graph against agent-contracts 0.6.0 (the Python library).

Generates seeded random contract sets, states, LLM behaviours, contract diffs and strings
for the LLM-input sanitiser; runs each through agent-contracts and through hearth-graph (the
`graph_diff` example binary, and `hearth graph decide` for a few cases); prints the agreement
and exits non-zero on any disagreement.

Run through scripts/graph-diff.sh, which makes the virtual environment and builds the Rust side.
Documented differences that the generator therefore does not produce: an explicitly empty
`when: {}` / `when_not: {}` (Hearth reads it as absent), an explicitly empty subgraph `nodes: []`
(Hearth reads it as "not listed"), and Hearth's extra validator checks (compared without them).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import random
import re
import subprocess
import sys
import tempfile

logging.disable(logging.CRITICAL)

from agent_contracts import ContractValidator, NodeContract, TriggerCondition  # noqa: E402
from agent_contracts.contract_diff import diff_contracts  # noqa: E402
from agent_contracts.registry import NodeRegistry  # noqa: E402
from agent_contracts.subgraph import SubgraphContract, SubgraphDefinition  # noqa: E402
from agent_contracts.supervisor import GenericSupervisor, SupervisorDecision  # noqa: E402
from agent_contracts.utils.sanitize_context import sanitize_for_llm_util  # noqa: E402

CUSTOM_SLICES = ["orders", "workflow", "zeta", "alpha"]
UNDECLARED = ["ghost", "cart"]
NODE_NAMES = ["search", "chat", "billing", "a", "b", "two words", "bad-name", "x1"]
SUPERVISORS = ["main", "main", "main", "side"]
KEYS = [
    "request.action", "request.n", "request.params.kind", "response.response_type",
    "_internal.flag", "orders.count", "workflow.step", "ghost.x", "zeta.k", "alpha.k",
    "action", "n", "flag", "k", "count", "step", "x",
]
VALUES = [
    True, False, None, 0, 1, 1.0, 2, 2.5, -1, "search", "x", "", "answer",
    [1, 2], [1.0, True], {"a": 1}, {"a": 1.0}, "1",
]


# ----------------------------------------------------------------------------- generation

def gen_value(r: random.Random):
    return r.choice(VALUES)


def gen_map(r: random.Random, n_max: int):
    return {r.choice(KEYS): gen_value(r) for _ in range(r.randint(1, n_max))}


def gen_trigger(r: random.Random) -> dict:
    t = {"priority": r.choice([0, 1, 5, 10, 10, 50, 50, 60, 100])}
    if r.random() < 0.7:
        t["when"] = gen_map(r, 3)
    if r.random() < 0.3:
        t["when_not"] = gen_map(r, 2)
    if r.random() < 0.4:
        t["llm_hint"] = r.choice(["use for search", "small talk", "pay"])
    return t


def gen_slices(r: random.Random, declared: list[str], k: int) -> list[str]:
    pool = ["request", "response", "_internal"] + declared + UNDECLARED
    return [r.choice(pool) for _ in range(r.randint(0, k))]


def gen_node(r: random.Random, name: str, declared: list[str]) -> dict:
    n = {
        "name": name,
        "description": r.choice(["", "does things", "searches"]),
        "reads": gen_slices(r, declared, 3),
        "writes": gen_slices(r, declared, 2),
        "requires_llm": r.random() < 0.3,
        "services": [r.choice(["db", "search_api", "mail"]) for _ in range(r.randint(0, 2))],
        "supervisor": "" if r.random() < 0.04 else r.choice(SUPERVISORS),
        "trigger_conditions": [gen_trigger(r) for _ in range(r.choice([0, 1, 1, 2, 2, 3]))],
        "is_terminal": r.random() < 0.15,
        "icon": r.choice([None, None, "🔍"]),
    }
    return n


def gen_file(r: random.Random) -> dict:
    declared = [s for s in CUSTOM_SLICES if r.random() < 0.5]
    names = r.sample(NODE_NAMES, r.randint(1, 6))
    if r.random() < 0.03:
        names.append(r.choice(names))  # a duplicate: both libraries refuse it
    if r.random() < 0.03:
        names.append("call_subgraph::x")  # the reserved prefix
    nodes = [gen_node(r, n, declared) for n in names]
    sups = sorted({n["supervisor"] for n in nodes})
    subgraphs = []
    ids = r.sample(["sg1", "sg2", "fashion"], r.choice([0, 0, 1, 2]))
    if ids and r.random() < 0.03:
        ids[0] = names[0]  # a subgraph named like a node: both libraries refuse it
    for sg_id in ids:
        sg = {
            "subgraph_id": sg_id,
            "description": "",
            "reads": gen_slices(r, declared, 3),
            "writes": gen_slices(r, declared, 2),
            "entrypoint": r.choice(sups + names + ["nowhere"]),
            "supervisors": [r.choice(sups + ["ghost_sup"]) for _ in range(r.randint(0, 2))],
        }
        if r.random() < 0.5:
            sg["nodes"] = [r.choice(names + ["ghost_node"]) for _ in range(r.randint(1, 2))]
        subgraphs.append(sg)
    f = {"slices": declared, "nodes": nodes, "subgraphs": subgraphs}
    if r.random() < 0.5:
        f["services"] = ["db", "search_api"]
    f["supervisor"] = {
        "terminal_response_types": r.choice([["done", "error"], ["done"], []]),
        "explicit_routing": r.choice(["return_to_sender", "return_to_sender", "none"]),
    }
    return f


def gen_state(r: random.Random, f: dict) -> dict:
    state: dict = {"request": {}, "response": {}, "_internal": {}}
    for s in CUSTOM_SLICES + UNDECLARED:
        if r.random() < 0.4:
            state[s] = {}
    for _ in range(r.randint(0, 6)):
        key = r.choice(KEYS)
        parts = key.split(".")
        if len(parts) == 1:
            parts = [r.choice(list(state))] + parts
        d = state.setdefault(parts[0], {})
        for p in parts[1:-1]:
            d = d.setdefault(p, {}) if isinstance(d.get(p, {}), dict) else {}
        d[parts[-1]] = gen_value(r)
    names = [n["name"] for n in f["nodes"]]
    ids = [s["subgraph_id"] for s in f["subgraphs"]]
    if r.random() < 0.3:
        state["response"]["response_type"] = r.choice(["done", "error", "results", "question"])
    if r.random() < 0.3:
        state["_internal"]["next_node"] = r.choice(
            names + ["done", "ghost", ""] + [f"call_subgraph::{i}" for i in ids + ["nope"]]
        )
    if r.random() < 0.2:
        state["request"]["action"] = "answer"
        state["_internal"]["asked_by"] = r.choice(names + ["ghost"])
    if r.random() < 0.25:
        state["_internal"]["decision"] = r.choice(names + ["done", ""])
    if isinstance(state["response"].get("response_type"), (list, dict)):
        # agent-contracts raises on an unhashable response_type; Hearth reads it as no type.
        state["response"]["response_type"] = "results"
    return state


def gen_llm(r: random.Random, f: dict, supervisor: str):
    roll = r.random()
    if roll < 0.35:
        return None
    mine = [n["name"] for n in f["nodes"] if n["supervisor"] == supervisor]
    ids = [s["subgraph_id"] for s in f["subgraphs"]]
    if roll < 0.85:
        return {"fails": True} if r.random() < 0.2 else {
            "answer": r.choice(
                (mine or ["done"]) * 3 + ["done", "ghost_node", ""]
                + [f"call_subgraph::{i}" for i in ids + ["nope"]]
            )
        }
    return {"fails": True}


# ----------------------------------------------------------------------------- Python side

def py_registry(f: dict) -> NodeRegistry:
    reg = NodeRegistry()
    for s in f.get("slices", []):
        reg.add_valid_slice(s)
    for n in f["nodes"]:
        triggers = [TriggerCondition(**t) for t in n["trigger_conditions"]]
        contract = NodeContract(**{**n, "trigger_conditions": triggers})
        reg.register(type("N", (), {"CONTRACT": contract}))
    for sg in f.get("subgraphs", []):
        contract = SubgraphContract(
            subgraph_id=sg["subgraph_id"], description=sg["description"],
            reads=sg["reads"], writes=sg["writes"], entrypoint=sg["entrypoint"],
        )
        definition = SubgraphDefinition(
            subgraph_id=sg["subgraph_id"], supervisors=sg.get("supervisors"),
            nodes=sg.get("nodes"),
        )
        reg.register_subgraph(contract, definition)
    return reg


def return_to_sender(state: dict):
    internal = state.get("_internal", {})
    nxt = internal.get("next_node")
    if isinstance(nxt, str) and nxt:
        return nxt
    if state.get("request", {}).get("action") == "answer":
        asked = internal.get("asked_by")
        if isinstance(asked, str) and asked:
            return asked
    return None


class ScriptedLlm:
    def __init__(self, behaviour: dict):
        self.behaviour = behaviour

    def with_structured_output(self, schema):
        return self

    async def ainvoke(self, prompt, config=None):
        if "answer" not in self.behaviour:
            raise RuntimeError("scripted failure")
        return SupervisorDecision(next_node=self.behaviour["answer"], reasoning="scripted")


def py_decide(case: dict, loop) -> dict:
    f = case["file"]
    try:
        reg = py_registry(f)
    except ValueError as e:
        return {"rejected": str(e)}
    settings = f["supervisor"]
    sup = GenericSupervisor(
        supervisor_name=case["supervisor"],
        llm=ScriptedLlm(case["llm"]) if case["llm"] else None,
        registry=reg,
        terminal_response_types=set(settings["terminal_response_types"]) or None,
        explicit_routing_handler=(
            return_to_sender if settings["explicit_routing"] == "return_to_sender" else None
        ),
    )
    d = loop.run_until_complete(sup.decide_with_trace(case["state"]))
    return {
        "selected_node": d.selected_node,
        "decision_type": d.reason.decision_type,
        "matched_rules": [[m.node, m.priority, m.condition] for m in d.reason.matched_rules],
        "llm_used": d.reason.llm_used,
        "llm_reasoning": d.reason.llm_reasoning,
    }


FINDING_PATTERNS = [
    (r"Unknown slice '(?P<slice>.*)' in node '(?P<node>.*)' reads", "unknown_slice_read"),
    (r"Unknown slice '(?P<slice>.*)' in node '(?P<node>.*)' writes", "unknown_slice_write"),
    (r"Writing to 'request' slice is discouraged \(node '(?P<node>.*)'\)", "writes_request"),
    (r"Unknown service '.*' required by node '(?P<node>.*)'", "unknown_service"),
    (r"Node '(?P<node>.*)' has no supervisor \(orphan\)", "orphan_node"),
    (r"Node '(?P<node>.*)' has no trigger conditions \(may be unreachable\)",
     "no_trigger_conditions"),
    (r"Subgraph '(?P<subgraph>.*)' entrypoint '.*' not found as node or supervisor",
     "subgraph_unknown_entrypoint"),
    (r"Subgraph '(?P<subgraph>.*)' definition references unknown supervisor '.*'",
     "subgraph_unknown_supervisor"),
    (r"Subgraph '(?P<subgraph>.*)' definition references unknown node '(?P<node>.*)'",
     "subgraph_unknown_node"),
    (r"Subgraph '(?P<subgraph>.*)' boundary violation: node '(?P<node>.*)' reads undeclared .*",
     "subgraph_reads_undeclared"),
    (r"Subgraph '(?P<subgraph>.*)' boundary violation: node '(?P<node>.*)' writes undeclared .*",
     "subgraph_writes_undeclared"),
    (r"Shared writers for '(?P<slice>.*)': .*", "shared_writers"),
]


def classify(severity: str, message: str) -> list:
    text = message[len("STRICT: "):] if message.startswith("STRICT: ") else message
    for pattern, kind in FINDING_PATTERNS:
        m = re.fullmatch(pattern, text)
        if m:
            g = m.groupdict()
            return [severity, kind, g.get("node"), g.get("subgraph"), g.get("slice")]
    return [severity, "unclassified", None, None, text]


def py_validate(case: dict) -> dict:
    try:
        reg = py_registry(case["file"])
    except ValueError as e:
        return {"rejected": str(e)}
    ks = case["known_services"]
    res = ContractValidator(reg, known_services=set(ks) if ks is not None else None,
                            strict=case["strict"]).validate()
    findings = [["error", m] for m in res.errors] + [["warning", m] for m in res.warnings] + [
        ["info", m] for m in res.info]
    return {
        "keys": [classify(s, m) for s, m in findings],
        "messages": [[s, m] for s, m in findings],
    }


def py_diff(case: dict) -> dict:
    try:
        a, b = py_registry(case["a"]), py_registry(case["b"])
    except ValueError as e:
        return {"rejected": str(e)}
    rep = diff_contracts(a.export_contracts(), b.export_contracts())
    return {
        "added": rep.added, "removed": rep.removed,
        "changes": [[c.node, c.severity, c.details] for c in rep.changes],
        "text": rep.to_text(), "breaking": rep.has_breaking(),
    }


# ----------------------------------------------------------------------------- Rust side, normalised

def rs_decide(out: dict) -> dict:
    if "rejected" in out or "error" in out:
        return out
    return {
        "selected_node": out["selected_node"],
        "decision_type": out["decision_type"],
        "matched_rules": [[m["node"], m["priority"], m["condition"]] for m in out["matched_rules"]],
        "llm_used": out["llm_used"],
        "llm_reasoning": out["llm_reasoning"],
    }


def rs_validate(out: dict) -> dict:
    if "rejected" in out or "error" in out:
        return out
    fs = [f for f in out["findings"] if not f["extra"]]
    return {
        "keys": [[f["severity"], f["kind"], f["node"], f["subgraph"], f["slice"]] for f in fs],
        "messages": [[f["severity"], f["message"]] for f in fs],
    }


def rs_diff(out: dict) -> dict:
    if "rejected" in out or "error" in out:
        return out
    rep = out["report"]
    return {
        "added": rep["added"], "removed": rep["removed"],
        "changes": [[c["node"], c["severity"], c["details"]] for c in rep["changes"]],
        "text": out["text"], "breaking": out["breaking"],
    }


# ----------------------------------------------------------------------------- diff and sanitiser cases

def mutate(r: random.Random, f: dict) -> dict:
    g = json.loads(json.dumps(f))
    nodes = g["nodes"]
    for _ in range(r.randint(1, 3)):
        if not nodes:
            break
        n = r.choice(nodes)
        op = r.randrange(14)
        if op == 0 and len(nodes) > 1:
            nodes.remove(n)
        elif op == 1:
            nodes.append(gen_node(r, r.choice(["new_node", "added"]), g["slices"]))
        elif op == 2:
            n["supervisor"] = r.choice(["main", "side", "other"])
        elif op == 3:
            n["requires_llm"] = not n["requires_llm"]
        elif op == 4:
            n["is_terminal"] = not n["is_terminal"]
        elif op == 5:
            n["description"] += " (changed)"
        elif op == 6:
            n["icon"] = r.choice([None, "💬", "🔍"])
        elif op == 7:
            n["reads"] = list(reversed(n["reads"]))  # order does not count
        elif op == 8 and n["writes"]:
            n["writes"].append(n["writes"][0])  # nor repeats
        elif op == 9:
            key = r.choice(["reads", "writes", "services"])
            if n[key] and r.random() < 0.5:
                n[key].pop(r.randrange(len(n[key])))
            else:
                n[key].append(r.choice(["request", "response", "orders", "db", "mail"]))
        elif op == 10 and n["trigger_conditions"]:
            n["trigger_conditions"][0]["priority"] += r.choice([0, 5])
        elif op == 11:
            for t in n["trigger_conditions"]:  # 1 -> 1.0, True -> 1: equal in Python
                for k, v in list(t.get("when", {}).items()):
                    if v is True:
                        t["when"][k] = 1
                    elif isinstance(v, int) and not isinstance(v, bool):
                        t["when"][k] = float(v)
        elif op == 12:
            n["trigger_conditions"].append(gen_trigger(r))
        elif op == 13 and n["trigger_conditions"]:
            t = n["trigger_conditions"][0]
            t["llm_hint"] = None if t.get("llm_hint") else "hint"
    return g


def b64(data: bytes, urlsafe=False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()


MAGIC = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0", b"GIF89a", b"%PDF-1.4", b"PK\x03\x04",
         b"\x1f\x8b\x08", b"ID3", b"RIFF\x00\x00\x00\x00WEBP", b"\x00\x00\x00\x18ftypmp42", b""]


def gen_string(r: random.Random) -> str:
    kind = r.randrange(12)
    payload = r.choice(MAGIC) + bytes(r.randrange(256) for _ in range(r.randint(0, 150)))
    if kind == 0:
        mime = r.choice(["image/png", "IMAGE/JPEG", "application/pdf", "text/plain", "", "img"])
        params = r.choice(["", ";charset=utf-8", ";a=b;c=d", ";bad"])
        tag = r.choice([";base64", ";BASE64", ""])
        body = r.choice([b64(payload), b64(payload, True), "hello, world", "", " " + b64(payload)])
        return r.choice(["data:", "DATA:", " data:"]) + mime + params + tag + "," + body
    if kind == 1:
        header = r.choice([{"alg": "HS256", "typ": "JWT"}, {"alg": 1}, {"alg": None},
                           {"alg": True}, {"alg": [1, 2]}, {"typ": "JWT"}, [1]])
        h = b64(json.dumps(header).encode(), True).rstrip("=")
        if r.random() < 0.2:
            h = h[:-1]
        claims = b64(b'{"sub":"1"}', True).rstrip("=")
        return f"{h}.{claims}.{r.choice(['sig', 'c2ln', ''])}"
    if kind == 2:
        return (r.choice(["http://", "https://", "HTTPS://", "ftp://"])
                + r.choice(["x.org/cat", "x.org/a b", "cdn.example.com/v/clip", ""])
                + r.choice([".png", ".JPEG", ".mp4", ".txt", ".tiff", ".gz", ""])
                + r.choice(["", "?size=2", "?a b", "#frag"]))
    if kind == 3:
        s = b64(payload, r.random() < 0.5)
        n = r.randint(110, 200)
        s = (s * (1 + n // max(len(s), 1)))[:n]
        s = s.rstrip("=") + "=" * r.choice([0, 0, 1, 2, 3])
        if r.random() < 0.1:
            i = r.randrange(len(s))
            s = s[:i] + r.choice([" ", "\n", "!"]) + s[i:]
        return s
    if kind == 4:
        return "".join(r.choice("0123456789abcdefABCDEF") for _ in range(r.randint(120, 140)))
    if kind == 5:
        return r.choice(["", "   ", "\t"]) + "x" * r.randint(0, 60) + r.choice(["", " \n", "\x1f"])
    if kind == 6:
        return "".join(r.choice(["é", "日本", "🙂", "a", " "]) for _ in range(r.randint(0, 40)))
    if kind == 7:
        return r.choice(["iVBORw0KGgo", "/9j/4AAQ", "R0lGODlh", "see " + "a" * 200])
    if kind == 8:
        return "word " * r.randint(1, 40)
    if kind == 9:
        return b64(payload) + " trailing text"
    if kind == 10:
        return "A" * r.randint(125, 135)
    return r.choice(["ok", "data:,", "data:;base64,", "data:image/png;base64", "a.b.c"])


def gen_sanitize(r: random.Random) -> dict:
    def value(depth=0):
        roll = r.random()
        if depth < 2 and roll < 0.2:
            return {f"k{i}": value(depth + 1) for i in range(r.randint(0, 3))}
        if depth < 2 and roll < 0.3:
            return [value(depth + 1) for _ in range(r.randint(0, 3))]
        if roll < 0.35:
            return r.choice([1, 2.5, True, None])
        return gen_string(r)
    return {"op": "sanitize", "value": value(), "max_len": r.choice([10, 20, 50, 1000, 10000])}


# ----------------------------------------------------------------------------- running

def run_rust(binary: str, cases: list) -> list:
    text = "\n".join(json.dumps(c) for c in cases) + "\n"
    out = subprocess.run([binary], input=text, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    if len(lines) != len(cases):
        raise SystemExit(f"graph_diff answered {len(lines)} of {len(cases)} cases: {out.stderr}")
    return [json.loads(line) for line in lines]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--cases", type=int, default=300, help="cases of each kind")
    ap.add_argument("--rust", required=True, help="the graph_diff example binary")
    ap.add_argument("--hearth", help="the hearth binary (checks `hearth graph decide` too)")
    ap.add_argument("--cli-cases", type=int, default=10)
    ap.add_argument("--show", type=int, default=5, help="disagreements to print per kind")
    args = ap.parse_args()
    r = random.Random(args.seed)
    loop = asyncio.new_event_loop()

    decide_cases, validate_cases, diff_cases, sanitize_cases = [], [], [], []
    for _ in range(args.cases):
        f = gen_file(r)
        sup = r.choice(["main", "main", "main", "side"])
        decide_cases.append({"op": "decide", "file": f, "state": gen_state(r, f),
                             "supervisor": sup, "llm": gen_llm(r, f, sup)})
        validate_cases.append({"op": "validate", "file": gen_file(r), "strict": r.random() < 0.3,
                               "known_services": r.choice([None, ["db"], ["db", "mail"]])})
        a = gen_file(r)
        diff_cases.append({"op": "diff", "a": a, "b": mutate(r, a)})
        sanitize_cases.append(gen_sanitize(r))

    rust = run_rust(args.rust, decide_cases + validate_cases + diff_cases + sanitize_cases)
    n = args.cases
    rs = {"decide": rust[:n], "validate": rust[n:2 * n], "diff": rust[2 * n:3 * n],
          "sanitize": rust[3 * n:]}

    failures = 0

    def report(kind, cases, pairs, agree):
        nonlocal failures
        same = [agree(p, q) for p, q in pairs]
        bad = [i for i, ok in enumerate(same) if not ok]
        pct = 100.0 * (len(same) - len(bad)) / max(len(same), 1)
        print(f"{kind}: {len(same) - len(bad)}/{len(same)} identical ({pct:.1f} %)")
        for i in bad[: args.show]:
            print(f"  case {i}: {json.dumps(cases[i], ensure_ascii=False)[:1500]}")
            print(f"    agent-contracts: {json.dumps(pairs[i][0], ensure_ascii=False)[:800]}")
            print(f"    hearth-graph:    {json.dumps(pairs[i][1], ensure_ascii=False)[:800]}")
        failures += len(bad)
        return bad

    def py_safe(fn, *a):
        try:
            return fn(*a)
        except Exception as e:  # a crash of the Python side is a case to look at
            return {"error": f"{type(e).__name__}: {e}"}

    py = [py_safe(py_decide, c, loop) for c in decide_cases]
    pairs = [(p, rs_decide(q)) for p, q in zip(py, rs["decide"])]

    def route(p, q):
        if "rejected" in p or "rejected" in q:
            return ("rejected" in p) == ("rejected" in q)
        return (p.get("selected_node"), p.get("decision_type")) == (
            q.get("selected_node"), q.get("decision_type"))

    report("decisions (node and decision type)", decide_cases, pairs, route)
    report("decision traces (rules, LLM use and reasoning too)", decide_cases, pairs,
           lambda p, q: route(p, q) and ("rejected" in p or p == q))

    py = [py_safe(py_validate, c) for c in validate_cases]
    pairs = [(p, rs_validate(q)) for p, q in zip(py, rs["validate"])]

    def findings(p, q):
        if "rejected" in p or "rejected" in q:
            return ("rejected" in p) == ("rejected" in q)
        return p.get("keys") == q.get("keys")

    report("validator findings (severity, kind, node)", validate_cases, pairs, findings)
    report("validator messages", validate_cases, pairs,
           lambda p, q: findings(p, q) and ("rejected" in p or p["messages"] == q["messages"]))

    py = [py_safe(py_diff, c) for c in diff_cases]
    pairs = [(p, rs_diff(q)) for p, q in zip(py, rs["diff"])]
    report("contract diffs", diff_cases, pairs,
           lambda p, q: ("rejected" in p and "rejected" in q) or p == q)

    py = [py_safe(lambda c: sanitize_for_llm_util(
        c["value"], c["max_len"], sanitize_binary_urls=True, base64_min_length=128,
        hex_min_length=128, classify_base64_magic=True), c) for c in sanitize_cases]
    pairs = list(zip(py, rs["sanitize"]))
    report("sanitiser outputs", sanitize_cases, pairs, lambda p, q: p == q)

    if args.hearth:
        cli = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, c in enumerate(decide_cases[: args.cli_cases]):
                fp, sp = os.path.join(tmp, f"{i}.json"), os.path.join(tmp, f"{i}.state.json")
                with open(fp, "w") as fh:
                    json.dump(c["file"], fh)
                with open(sp, "w") as fh:
                    json.dump(c["state"], fh)
                cmd = [args.hearth, "-q", "graph", "decide", fp, "--state", sp,
                       "--supervisor", c["supervisor"]]
                if c["llm"] and "answer" in c["llm"]:
                    cmd += ["--llm-answer", c["llm"]["answer"]]
                elif c["llm"]:
                    cmd += ["--llm-fails"]
                out = subprocess.run(cmd, capture_output=True, text=True)
                q = (rs_decide(json.loads(out.stdout)) if out.returncode == 0
                     else {"rejected": out.stderr.strip()})
                cli.append((rs_decide(rs["decide"][i]), q))
        # The CLI's scripted LLM gives its own reasoning text; the rest must agree.
        def same(p, q):
            strip = lambda d: {k: v for k, v in d.items() if k != "llm_reasoning"}  # noqa: E731
            return route(p, q) and ("rejected" in p or strip(p) == strip(q))

        report("`hearth graph decide` vs the library", decide_cases, cli, same)

    if failures:
        print(f"FAILED: {failures} disagreement(s) (seed {args.seed}, {args.cases} cases each)")
        return 1
    print(f"OK: hearth-graph agrees with agent-contracts 0.6.0 (seed {args.seed}, "
          f"{args.cases} cases each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
