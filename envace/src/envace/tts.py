"""Test-time private rehearsal of EnvACE (project page of https://arxiv.org/abs/2608.06197, "test-time scaling"):
before acting in the real environment the policy rehearses N imagined trajectories with its own rehearsal role,
either in parallel (independent) or sequentially (each attempt sees the memory of the earlier ones), condenses them
into a rehearsal memory, and then performs one committed execution with the real tools.

Neither N, the condensation prompt nor the injection point is public: we use N = `tts_budget` (4, matching
`val_n`), a deterministic condensation (the calls made and the responses rehearsed, per attempt) and put the memory
in the system prompt (README, deviations). The rehearsals never see the ground-truth few-shot of the sample.
"""

import json

from .rehearsal import RehearsalCollector, Trajectory


MODES = ("parallel", "sequential")


def rehearsal_memory(attempts: list[Trajectory]) -> str:
    """Condense imagined trajectories: per attempt, each tool call and its rehearsed response (or error) in order."""
    lines = ["# Rehearsal memory (imagined, not real results; use them to plan, then act for real)"]
    for k, t in enumerate(attempts):
        lines.append(f"## Rehearsal {k + 1} (ended: {t.stop_reason})")
        calls = [m for m in t.messages if m["role"] == "assistant" and m.get("tool_calls")]
        if not calls:
            lines.append("No tool call was made.")
        pending = []
        for m in t.messages:
            if m["role"] == "assistant":
                pending = list(m.get("tool_calls") or [])
            elif m["role"] == "tool" and pending:
                fn = pending.pop(0)["function"]
                lines.append(f"- {fn['name']}({json.dumps(fn['arguments'])}) -> {m['content'][:300]}")
    return "\n".join(lines)


def private_task(task: dict, memory: str = "") -> dict:
    """The task as the test-time policy sees it: no ground-truth few-shot, the memory appended to the system prompt."""
    system = "\n\n".join(x for x in (task.get("system"), memory) if x) or None
    return {**task, "system": system, "tool_call_response_map": {}}


def rehearse_then_execute(tasks: list[dict], generate, rehearsal: RehearsalCollector, execution: RehearsalCollector,
                          mode: str, budget: int) -> list[Trajectory]:  # fmt: skip
    """N private rehearsals per task (`rehearsal`: tool_return_mode=agent, no judge), then one committed execution
    per task (`execution`: real tools, judged) with the rehearsal memory in its system prompt."""
    if mode not in MODES:
        raise ValueError(f"Unknown test-time rehearsal mode {mode!r}; valid: {', '.join(MODES)}.")
    attempts: list[list[Trajectory]] = [[] for _ in tasks]
    if mode == "parallel":  # N independent imagined trajectories per task, in one batch
        batch = [private_task(t) for t in tasks for _ in range(budget)]
        trajs = rehearsal.collect(batch, list(range(len(batch))), generate)
        attempts = [trajs[i * budget : (i + 1) * budget] for i in range(len(tasks))]
    else:  # attempt k sees the memory of attempts 1..k-1
        for _ in range(budget):
            batch = [private_task(t, rehearsal_memory(a) if a else "") for t, a in zip(tasks, attempts, strict=True)]
            for a, traj in zip(attempts, rehearsal.collect(batch, list(range(len(batch))), generate), strict=True):
                a.append(traj)
    final = [
        {**t, "system": private_task(t, rehearsal_memory(a))["system"]} for t, a in zip(tasks, attempts, strict=True)
    ]
    return execution.collect(final, list(range(len(final))), generate)
