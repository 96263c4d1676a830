"""VitaBench through the `vitabench2` harness's CLI (a subprocess, never an import), against a served checkpoint.

The paper reports VitaBench next to BFCL-v4 and tau2-bench (EnvACE project page, main table); the split, trials and
user-simulator model are not published (package README "Deviations"). Our default is VitaBench 1.0 cross-scenario
tasks in the official layout (`--tasks FOLDER`); the policy under test is the `--agent`, served behind an
OpenAI-compatible endpoint (`agentrl_shared.serve` on CPU, `vllm serve` on GPU); the user simulator and the judge
are other endpoints (by default the same one). The harness writes `results.jsonl` as it goes (a rerun resumes) and
`summary.json`, whose `metrics` we copy into our results file.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path


def harness() -> list[str]:
    """The `vitabench2` command of this environment (its console script, else `python -m vitabench2.cli`)."""
    script = Path(sys.executable).parent / "vitabench2"
    if script.exists():
        return [str(script)]
    found = shutil.which("vitabench2")
    return [found] if found else [sys.executable, "-m", "vitabench2.cli"]


def vitabench_command(agent_url: str, agent_model: str, out: Path, tasks: str | None = None,
                      user: str | None = None, judge: str | None = None, extra: list[str] | None = None) -> list[str]:  # fmt: skip
    """`vitabench2 run` with the served policy as agent (`openai:MODEL@URL`); `user` / `judge` are back-end specs
    (default: the agent's endpoint); `extra` is passed through (e.g. `--users`, `--trials 4`, `--max-steps`)."""
    spec = f"openai:{agent_model}@{agent_url}"
    cmd = [*harness(), "run", "--agent", spec, "--user", user or spec, "--judge", judge or spec, "--output", str(out)]
    return cmd + (["--tasks", tasks] if tasks else []) + list(extra or [])


def run_vitabench(agent_url: str, agent_model: str, out: Path, tasks: str | None = None, user: str | None = None,
                  judge: str | None = None, extra: list[str] | None = None, timeout: float | None = None) -> dict:  # fmt: skip
    """Run the harness to completion and return `{"command", "summary"}`; a failing harness raises with its stderr."""
    out = Path(out)
    cmd = vitabench_command(agent_url, agent_model, out, tasks, user, judge, extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"vitabench2 exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"command": cmd, "summary": summary}
