#!/usr/bin/env python3
"""Twenty varied tool-use tasks through `hearth agent --json` on a real model; counts the runs
whose final answer contains the expected text, and writes benches/results/<date>-agent-eval.json.

    python benches/agent-eval.py target/release/hearth "$(scripts/fetch-test-models.sh)"
"""
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


def main():
    hearth, model = sys.argv[1], sys.argv[2]
    ws = pathlib.Path(tempfile.mkdtemp())
    (ws / "notes.txt").write_text("Meeting at noon.\nThe secret code is PINEAPPLE-42.\n")
    rows, passed = [], 0
    for task, expect in TASKS:
        start = time.time()
        p = subprocess.run([hearth, "agent", "--model", model, "--device", "cpu", "--max-tokens", "160",
                            "--tools", "calculator,time,files,python", "--workspace", str(ws), "--json", task],
                           capture_output=True, text=True)
        secs = time.time() - start
        try:
            run = json.loads(p.stdout)
        except json.JSONDecodeError:
            run = {"answer": "", "stop_reason": "crash", "tool_calls": [], "iterations": 0, "stderr": p.stderr[-500:]}
        ok = expect.lower() in run.get("answer", "").lower()
        passed += ok
        rows.append({"task": task, "expect": expect, "ok": ok, "answer": run.get("answer", ""),
                     "stop_reason": run.get("stop_reason"), "iterations": run.get("iterations"),
                     "tools": [(c["name"], c["arguments"], c["content"][:80]) for c in run.get("tool_calls", [])],
                     "seconds": round(secs, 1)})
        print(f"{'PASS' if ok else 'FAIL'} {secs:5.1f}s {task} -> {run.get('answer', '')[:100]!r}", flush=True)
    out = pathlib.Path(__file__).parent / "results" / f"{TODAY}-agent-eval.json"
    out.write_text(json.dumps({"command": f"python benches/agent-eval.py {hearth} {model}",
                               "model": pathlib.Path(model).name, "passed": passed, "total": len(TASKS),
                               "runs": rows}, indent=1, ensure_ascii=False))
    print(f"{passed}/{len(TASKS)} answered correctly; wrote {out}")


if __name__ == "__main__":
    main()
