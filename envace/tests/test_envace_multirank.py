"""Two CPU processes (accelerate, DDP over gloo): one EnvACE rollout and optimizer step in lock-step.

The ranks collect different numbers of rows (`multirank/envace_two_ranks.py`: single-turn tasks, scripted answers
that are garbage 40% of the time on rank 0 and 70% on rank 1). Every row of both ranks is trained exactly once, both
ranks run the same number of micro-batches, they hold identical (and changed) parameters after the step, and the
logged rollout metrics count the rows of both ranks, not rank 0's alone.

About 2.5 minutes on one core (both processes pinned to it): the step's two forwards dominate, since TRL's chunked
log-prob scores every position (prompt included) over the 151k-token Qwen vocabulary on CPU.
"""

import json
from pathlib import Path

import pytest
import torch
from test_envace_batching import real_rows
from transformers import AutoModelForCausalLM

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import launch_two_ranks


SCRIPT = Path(__file__).parent / "multirank" / "envace_two_ranks.py"


@pytest.mark.timeout(900)
def test_two_ranks_train_every_row_once_in_lock_step_with_rank_reduced_metrics(tmp_path):
    out = tmp_path / "run"
    proc = launch_two_ranks(out, [str(SCRIPT), str(out)], timeout=800, deepspeed=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [torch.load(out / f"rank{r}_rollout.pt") for r in (0, 1)]
    rows = [row for rank in ranks for row in rank["rows"]]
    assert len(ranks[0]["rows"]) != len(ranks[1]["rows"])  # the ranks collected different numbers of rows
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == 2  # gradient_accumulation_steps, in lock-step
    trained = real_rows(ranks[0]["batches"]) + real_rows(ranks[1]["batches"])
    assert sorted(trained) == sorted((tuple(p), tuple(c)) for p, c, _, failed in rows if not failed)
    advantages = torch.cat([b["advantages"] for rank in ranks for b in rank["batches"]])
    assert advantages.abs().sum() > 0  # rewards varied within groups: the step has a gradient
    params = [torch.load(out / f"rank{r}_params.pt") for r in (0, 1)]
    assert all(torch.equal(params[0][k], params[1][k]) for k in params[0])  # one step, same weights everywhere
    init = AutoModelForCausalLM.from_pretrained(tiny_qwen3()).state_dict()
    assert all(not torch.equal(init[k], params[0][k]) for k in params[0] if k in init)
    logs = [h for h in json.loads((out / "results.json").read_text())["log_history"] if "loss" in h]
    assert len(logs) == 1
    roles = [role for _, _, role, _ in rows]
    assert logs[0]["envace/caller_rows"] == roles.count("caller")
    assert logs[0]["envace/simulator_rows"] == roles.count("simulator")
    assert logs[0]["rollout/rows"] == len(rows)
    assert logs[0]["rollout/generated_tokens"] == sum(len(c) for _, c, _, _ in rows)
