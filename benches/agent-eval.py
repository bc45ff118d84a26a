#!/usr/bin/env python3
"""Twenty varied tool-use tasks through `hearth agent --json` on a real model; counts the runs
whose final answer contains the expected text, and writes benches/results/<date>-agent-eval.json.

    python benches/agent-eval.py target/release/hearth "$(scripts/fetch-test-models.sh)"
    python benches/agent-eval.py HEARTH MODEL --record runs/ --replay   # each run recorded, then
                                                                       # replayed, recorded and live
    python benches/agent-eval.py HEARTH MODEL --free-tool-calls        # tool calls not constrained

Tool calls are decoded under the tools' schemas (Hearth's default) unless --free-tool-calls.
With --replay every recording is run again by `hearth replay` (recorded answers and tool
results: must take the same steps), `hearth replay --live --recorded-tools` (the model again,
greedy, on the recorded tool results: must take the same steps) and `hearth replay --live`
(model and tools again: the first divergence is reported; the clock tools differ by nature).
"""
import argparse
import datetime
import json
import pathlib
import subprocess
import sys
import tempfile
import time

TODAY = datetime.date.today()
TASKS = [
    ("What is 1234 * 5678? Use the calculator.", "7006652"),
    ("What is 2 to the power of 20?", "1048576"),
    ("Compute (17 + 25) * 3.", "126"),
    ("What is 987654 - 123456?", "864198"),
    ("What is 144 divided by 12?", "12"),
    ("What is 15% of 240?", "36"),
    ("How many seconds are there in a day?", "86400"),
    ("What is the square root of 1764?", "42"),
    ("I buy 7 items at 13 dollars each. How much do I pay in total?", "91"),
    ("What is 99 * 99?", "9801"),
    ("What is 123456789 * 9?", "1111111101"),
    ("What is 2^10 + 3^5?", "1267"),
    ("What is the remainder when 100 is divided by 7?", "2"),
    ("What year is it now? Use the current time tool.", str(TODAY.year)),
    ("What day of the week is it today?", TODAY.strftime("%A")),
    ("Read the file notes.txt in the workspace and tell me the secret code in it.", "PINEAPPLE-42"),
    ("List the files in the workspace.", "notes.txt"),
    ("Use Python to compute the sum of the integers from 1 to 100.", "5050"),
    ("Use Python to reverse the string 'hearth'.", "htraeh"),
    ("What is 3.5 * 4?", "14"),
]


def replay(hearth, model, record, live, recorded_tools=False):
    cmd = [hearth, "replay"] + (["--live", "--model", model, "--device", "cpu"] if live else []) \
        + (["--recorded-tools"] if recorded_tools else []) + [str(record)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    same = p.returncode == 0
    why = "" if same else " | ".join(l.strip() for l in p.stderr.strip().splitlines()[-3:])[:400]
    return {"same": same, "divergence": why}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hearth")
    ap.add_argument("model")
    ap.add_argument("--record", metavar="DIR", help="record each run in DIR/task-NN.jsonl")
    ap.add_argument("--replay", action="store_true", help="replay every recording (needs --record)")
    ap.add_argument("--free-tool-calls", action="store_true", help="tool calls not constrained")
    ap.add_argument("--out", help="results file (default benches/results/<date>-agent-eval[-free].json)")
    args = ap.parse_args()
    if args.replay and not args.record:
        ap.error("--replay needs --record DIR")
    hearth, model = args.hearth, args.model
    rec_dir = pathlib.Path(args.record) if args.record else None
    if rec_dir:
        rec_dir.mkdir(parents=True, exist_ok=True)
    ws = pathlib.Path(tempfile.mkdtemp())
    (ws / "notes.txt").write_text("Meeting at noon.\nThe secret code is PINEAPPLE-42.\n")
    rows, passed = [], 0
    for i, (task, expect) in enumerate(TASKS):
        start = time.time()
        cmd = [hearth, "agent", "--model", model, "--device", "cpu", "--max-tokens", "160",
               "--tools", "calculator,time,files,python", "--workspace", str(ws), "--json"]
        record = rec_dir / f"task-{i:02}.jsonl" if rec_dir else None
        if record:
            cmd += ["--record", str(record)]
        if args.free_tool_calls:
            cmd.append("--free-tool-calls")
        p = subprocess.run(cmd + [task], capture_output=True, text=True)
        secs = time.time() - start
        try:
            run = json.loads(p.stdout)
        except json.JSONDecodeError:
            run = {"answer": "", "stop_reason": "crash", "tool_calls": [], "iterations": 0, "stderr": p.stderr[-500:]}
        ok = expect.lower() in run.get("answer", "").lower()
        passed += ok
        row = {"task": task, "expect": expect, "ok": ok, "answer": run.get("answer", ""),
               "stop_reason": run.get("stop_reason"), "iterations": run.get("iterations"),
               "tools": [(c["name"], c["arguments"], c["content"][:80]) for c in run.get("tool_calls", [])],
               "seconds": round(secs, 1)}
        if record:
            row["recording"] = str(record)
        rows.append(row)
        print(f"{'PASS' if ok else 'FAIL'} {secs:5.1f}s {task} -> {run.get('answer', '')[:100]!r}", flush=True)
    summary = {}
    if args.replay:
        # Recorded answers and tool results; the model live with the recorded tool results;
        # the model and the tools live (the clock tools then differ by nature).
        for key, live, recorded in (("replay", False, False), ("replay_live_recorded_tools", True, True),
                                    ("replay_live", True, False)):
            for row in rows:
                row[key] = replay(hearth, model, row["recording"], live, recorded)
                if not row[key]["same"]:
                    print(f"{key}: {row['recording']}: {row[key]['divergence']}", flush=True)
            summary[key] = sum(r[key]["same"] for r in rows)
            print(f"{key}: {summary[key]}/{len(rows)} runs took the same steps", flush=True)
    suffix = "-free" if args.free_tool_calls else ""
    out = pathlib.Path(args.out) if args.out else \
        pathlib.Path(__file__).parent / "results" / f"{TODAY}-agent-eval{suffix}.json"
    out.write_text(json.dumps({"command": "python benches/agent-eval.py " + " ".join(sys.argv[1:]),
                               "model": pathlib.Path(model).name,
                               "tool_calls": "free" if args.free_tool_calls else "constrained",
                               "passed": passed, "total": len(TASKS), **summary,
                               "runs": rows}, indent=1, ensure_ascii=False))
    print(f"{passed}/{len(TASKS)} answered correctly; wrote {out}")


if __name__ == "__main__":
    main()
