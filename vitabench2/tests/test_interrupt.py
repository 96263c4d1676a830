"""Ctrl-C: a run interrupted with SIGINT stops promptly, leaves a valid results file, and once resumed holds the same
records as an uninterrupted run (none lost, none doubled)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from interrupt_driver import build

from vitabench2.runner import read_records


def normalized(record: dict) -> dict:
    """A record without what legitimately differs between runs: timings and random tool-call ids."""
    out = {k: v for k, v in record.items() if k != "duration_s"}
    out["messages"] = [{k: v for k, v in m.items() if k != "tool_call_id"} for m in record["messages"]]
    for m in out["messages"]:
        if m.get("tool_calls"):
            m["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in m["tool_calls"]]
    return out


def test_sigint_then_resume_equals_uninterrupted(tmp_path):
    build(str(tmp_path / "full"), 0.0).run()
    full = {
        (r["user_id"], r["trial"], r["subtask_id"]): normalized(r)
        for r in read_records(tmp_path / "full" / "results.jsonl")
    }
    assert len(full) == 10

    out = tmp_path / "interrupted"
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": str(tests) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # 0.3 s per model call: the run is still going when the third record lands, even on a loaded machine
    cmd = [sys.executable, str(tests / "interrupt_driver.py"), str(out), "0.3"]
    proc = subprocess.Popen(cmd, env=env, cwd=tests)
    results = out / "results.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and len(read_records(results)) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    sent = time.time()
    proc.send_signal(signal.SIGINT)  # an impatient second Ctrl-C changes nothing
    assert proc.wait(timeout=30) == 130
    assert time.time() - sent < 5  # stops at the next model call, not at the end of the run
    lines = results.read_text().splitlines()
    partial = [json.loads(line) for line in lines]  # every line is a whole record
    assert 3 <= len(partial) < 10
    assert json.loads((out / "summary.json").read_text())["num_records"] == len(partial)

    build(str(out), 0.0).run()  # resume
    resumed = read_records(results)
    keys = [(r["user_id"], r["trial"], r["subtask_id"]) for r in resumed]
    assert len(keys) == len(set(keys)) == 10  # none lost, none doubled
    assert {k: normalized(r) for k, r in zip(keys, resumed)} == full
