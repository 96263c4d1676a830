"""Two CPU processes under DeepSpeed ZeRO-3 (gloo): an EnvACE rollout, its one optimizer step and the evaluation on
the last rollout, in lock-step.

The ranks collect different numbers of rows from episodes that end after 1, 2 or 3 generations
(`multirank/envace_two_ranks.py`: single-turn tasks, scripted answers that are garbage 40% of the time on rank 0 and
70% on rank 1), and the 3-task panel gives the ranks slices of 2 and 1 episodes. The run must finish before the
timeout (a hang, or a rank alone in the final evaluation, fails the test), every row of both ranks is trained exactly
once, both ranks hold the same parameters afterwards, the logged metrics count both ranks, and the update equals, to
1e-5, SGD on the loss that a naive single-process loop computes over the same rows: TRL's PPO-clip term, each row's
token mean averaged over all of the step's rows (the official weighting, `loss_type=grpo`: every row weighs the same;
KL and entropy are off in EnvACE).

About 2.5 minutes on one core: the step's forwards and backwards over ~1k-token rows dominate.
"""

import json
from importlib.resources import files
from pathlib import Path

import pytest
import torch
from test_envace_batching import real_rows
from transformers import AutoModelForCausalLM

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import launch_two_ranks
from envace.config import EnvACEConfig


SCRIPT = Path(__file__).parent / "multirank" / "envace_two_ranks.py"


def naive_reference_update(batches: list[dict], args: EnvACEConfig) -> dict[str, torch.Tensor]:
    """One SGD step on the step's loss over every real row, computed row by row without padding from the initial
    weights: (1 / rows of the step) sum_rows (1 / T_row) sum_t -min(c1_t A, c2_t A), c1 = min(r_t, delta),
    c2 = clip(r_t, 1 - eps, 1 + eps_high), r_t = pi / pi_old = exp(l_t - sg(l_t)) (one step: theta_old = theta)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)
    rows = []
    for b in batches:
        for i in range(b["prompt_ids"].size(0)):
            m = b["completion_mask"][i].bool()
            if m.any():
                prompt = b["prompt_ids"][i][b["prompt_mask"][i].bool()]
                rows.append((prompt, b["completion_ids"][i][m], b["advantages"][i].item()))
    total = 0.0
    for prompt, completion, adv in rows:
        logits = model(torch.cat([prompt, completion]).unsqueeze(0)).logits[0]
        logits = logits[len(prompt) - 1 : len(prompt) + len(completion) - 1]  # positions predicting the completion
        logp = torch.log_softmax(logits.float(), dim=-1).gather(1, completion.unsqueeze(1)).squeeze(1)  # (T,)
        row = 0.0
        for t in range(len(completion)):
            ratio = torch.exp(logp[t] - logp[t].detach())
            c1 = torch.clamp(ratio, max=args.delta)
            c2 = torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon_high)
            row = row - torch.minimum(c1 * adv, c2 * adv)
        total = total + row / len(completion)
    (total / len(rows)).backward()
    return {name: (p - args.learning_rate * p.grad).detach() for name, p in model.named_parameters()}


@pytest.mark.timeout(900)
def test_two_ranks_zero3_rollout_step_and_last_rollout_eval_match_a_naive_loop(tmp_path):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    proc = launch_two_ranks(out, [str(SCRIPT), str(out), str(ds)], timeout=800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["num_processes"] == 2 and results["rollouts"] == 1 and results["steps"] == 1
    assert [p["rollouts"] for p in results["curve"]] == [1]  # the last rollout's evaluation, reused as the final
    assert results["final"]["num_episodes"] == 3  # the whole panel, over both ranks
    records = [json.loads(line) for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert [r["rollouts"] for r in records] == [1, 1, 1]  # that evaluation's episodes, written once

    ranks = [torch.load(out / f"rank{r}_rollout.pt") for r in (0, 1)]
    rows = [row for rank in ranks for row in rank["rows"]]
    assert len(ranks[0]["rows"]) != len(ranks[1]["rows"])  # the ranks collected different numbers of rows
    assert len({length for *_, length in rows}) > 1  # episodes ended after different numbers of generations
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == 2  # gradient_accumulation_steps, in lock-step
    trained = real_rows(ranks[0]["batches"]) + real_rows(ranks[1]["batches"])
    assert sorted(trained) == sorted((tuple(p), tuple(c)) for p, c, _, _ in rows)  # every row once, none dropped
    n_tokens = sum(len(c) for _, c, _, _ in rows)
    for b in ranks[0]["batches"] + ranks[1]["batches"]:
        assert b["token_normalizer"].item() == pytest.approx(n_tokens / 2)  # the step's real tokens / world
        assert b["row_normalizer"].item() == pytest.approx(len(rows) / 2)  # the step's rows / world
    batches = ranks[0]["batches"] + ranks[1]["batches"]
    assert torch.cat([b["advantages"] for b in batches]).abs().sum() > 0  # rewards varied within groups

    log = next(h for h in results["log_history"] if "loss" in h)
    roles = [role for _, _, role, _ in rows]
    assert log["env/num_episodes"] == 8  # 4 episodes per rank, reduced over ranks
    assert log["envace/caller_rows"] == roles.count("caller")
    assert log["envace/simulator_rows"] == roles.count("simulator")
    assert log["rollout/rows"] == len(rows)
    assert log["rollout/generated_tokens"] == n_tokens

    p0, p1 = (torch.load(out / f"rank{r}_params.pt") for r in (0, 1))
    assert all(torch.equal(p0[k], p1[k]) for k in p0)  # one step, the same weights everywhere
    args = EnvACEConfig(output_dir=str(tmp_path), learning_rate=1.0, use_cpu=True, bf16=False, judge="rule")
    expected = naive_reference_update(batches, args)
    initial = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32).state_dict()
    moved = max((p0[k] - initial[k]).abs().max().item() for k in p0)
    assert moved > 1e-3  # the step really moved the weights
    worst = max((p0[k] - expected[k]).abs().max().item() for k in p0)
    assert worst < 1e-5, f"largest difference to the naive reference update: {worst:.2e}"
