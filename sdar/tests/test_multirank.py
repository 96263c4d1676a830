"""Two CPU processes under DeepSpeed ZeRO-3 (gloo): rollout, optimizer step and end-of-run evaluation in lock-step.

The scripted environment ends episodes after 1 turn on rank 0 and after 1 or 3 turns on rank 1, so the ranks collect
different numbers of rows; each rank hosts it in 2 worker processes, as the paper configs host theirs. The run must
finish before the timeout (a hang fails the test), both ranks must hold the same parameters afterwards, and the update
of the (only) optimizer step must equal, to 1e-5, SGD on the loss that a naive single-process loop computes over the
same rows: token-mean over all of the step's tokens of the clipped policy term, k3 KL, entropy bonus and the gated SDAR
term.
"""

import json
from importlib.resources import files
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import launch_two_ranks
from sdar.config import SDARConfig


SCRIPT = Path(__file__).parent / "multirank" / "run_two_ranks.py"


def naive_reference_update(batches: list[dict], args: SDARConfig) -> dict[str, torch.Tensor]:
    """One SGD step on the loss of every real row, computed row by row without padding, from the initial weights."""
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)
    rows = []
    for b in batches:
        for i in range(b["prompt_ids"].size(0)):
            m = b["completion_mask"][i].bool()
            if m.any():
                prompt = b["prompt_ids"][i][b["prompt_mask"][i].bool()]
                teacher = torch.tensor(b["teacher_prompts"][i])
                rows.append((prompt, b["completion_ids"][i][m], b["advantages"][i].item(), teacher))
    n_tokens = sum(len(c) for _, c, _, _ in rows)

    def token_logps(prompt, completion, with_entropy=False):
        logits = model(torch.cat([prompt, completion]).unsqueeze(0)).logits[0]
        logits = logits[len(prompt) - 1 : len(prompt) + len(completion) - 1]  # positions predicting the completion
        logp_all = torch.log_softmax(logits.float(), dim=-1)
        logp = logp_all.gather(1, completion.unsqueeze(1)).squeeze(1)
        return (logp, -(logp_all.exp() * logp_all).sum(-1)) if with_entropy else logp

    total = 0.0
    for prompt, completion, adv, teacher in rows:
        with torch.no_grad():
            l_ref = token_logps(prompt, completion)  # the reference model is the initial policy
            l_teacher = token_logps(teacher, completion)
        l_s, entropy = token_logps(prompt, completion, with_entropy=True)
        for t in range(len(completion)):
            ratio = torch.exp(l_s[t] - l_s[t].detach())  # one optimizer step: theta_old = theta
            pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon_high))
            d = l_ref[t] - l_s[t]
            kl = torch.exp(d) - d - 1
            gate = torch.sigmoid(args.gate_beta * (l_teacher[t] - l_s[t].detach()))
            total = total + pg + args.beta * kl - args.entropy_coef * entropy[t]
            total = total + args.sdar_coef * gate * (l_teacher[t] - l_s[t])
    (total / n_tokens).backward()
    return {name: (p - args.learning_rate * p.grad).detach() for name, p in model.named_parameters()}


def test_two_ranks_zero3_rollout_step_and_final_eval_match_a_naive_loop(tmp_path):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    proc = launch_two_ranks(out, [str(SCRIPT), str(out), str(ds)], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["num_processes"] == 2 and results["rollouts"] == 1 and results["steps"] == 1
    assert results["final"]["num_episodes"] == 3  # end-of-run evaluation ran (on both ranks, or it would hang)
    records = [json.loads(line) for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert [r["rollouts"] for r in records] == [1, 1, 1]  # the last rollout's evaluation, per episode, written once
    assert [p["rollouts"] for p in results["curve"]] == [1]  # reused as the final one (no second evaluation)
    log = next(h for h in results["log_history"] if "env/num_episodes" in h)
    assert log["env/num_episodes"] == 8  # 4 episodes per rank, reduced over ranks
    assert log["rollout/rows"] == 12  # rank 0: 4 one-turn episodes; rank 1: 2 x 3 turns + 2 x 1 turn
    for r in range(2):  # every step played in the rank's 2 worker processes, none failed, none moved in
        pool = json.loads((out / f"rank{r}_pool.json").read_text())
        assert pool["workers"] == 2 and pool["pooled_calls"] > 0 and pool["in_process"] is None, pool
        assert pool["failures"] == 0, pool

    ranks = [torch.load(out / f"rank{r}_batches.pt") for r in range(2)]
    real = [int(b["completion_mask"].any(dim=1).sum()) for r in ranks for b in r]
    assert sum(real) == 12  # every row once after balancing (6 per rank), the rest empty micro-batches
    assert len(ranks[0]) == len(ranks[1]) == 8  # same number of micro-batches (forwards) on both ranks

    p0, p1 = (torch.load(out / f"rank{r}_params.pt") for r in range(2))
    assert all(torch.equal(p0[k], p1[k]) for k in p0)
    args = SDARConfig(output_dir=str(tmp_path), learning_rate=1.0, num_generations=2, use_cpu=True, bf16=False)
    expected = naive_reference_update([b for r in ranks for b in r], args)
    initial = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32).state_dict()
    moved = max((p0[k] - initial[k]).abs().max().item() for k in p0)
    assert moved > 1e-3  # the step really moved the weights
    worst = max((p0[k] - expected[k]).abs().max().item() for k in p0)
    assert worst < 1e-5, f"largest difference to the naive reference update: {worst:.2e}"


def test_sigterm_on_one_rank_stops_both_at_the_same_rollout_with_one_checkpoint_and_resumes(tmp_path):
    """A signal that reached rank 1 alone (during the first of 2 rollouts) stops both ranks after that rollout
    (`RolloutCadence`: the ranks agree at each rollout end), with exit 143, one checkpoint and no results; the same
    run resumed from it trains the second rollout and ends with its results."""
    script = Path(__file__).parent / "multirank" / "run_two_ranks_sigterm.py"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    stopped = launch_two_ranks(tmp_path, [str(script), str(tmp_path), str(ds)], timeout=900)
    assert stopped.returncode != 0, "a stopped run must not read as finished"
    ends = [json.loads((tmp_path / f"rank{r}_exit.json").read_text()) for r in range(2)]
    assert ends[0] == ends[1] and ends[0]["status"] == 143 and ends[0]["rollouts_done"] == 1, ends
    run = tmp_path / "run"
    saved = sorted(run.glob("checkpoint-*"))
    assert [p.name for p in saved] == [f"checkpoint-{ends[0]['global_step']}"]  # saved once, by both ranks
    assert not (run / "results.json").exists()
    resumed = launch_two_ranks(tmp_path, [str(script), str(tmp_path), str(ds), str(saved[0])], timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    ends = [json.loads((tmp_path / f"rank{r}_exit.json").read_text()) for r in range(2)]
    assert ends[0] == ends[1] and ends[0]["status"] == 0 and ends[0]["rollouts_done"] == 2, ends
    assert json.loads((run / "results.json").read_text())["final"]["num_episodes"] == 2


@pytest.mark.slow
def test_sdar_train_smoke_on_two_processes_counts_the_episodes_of_both_ranks(tmp_path):
    """`sdar train --config smoke` launched on 2 CPU processes (ZeRO-3): env/num_episodes = 4 episodes x 2 ranks."""
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    proc = launch_two_ranks(out, ["-m", "sdar.cli", "train", "--config", "smoke", f"trainer.output_dir={out}",
                                  f"trainer.deepspeed={ds}", "env.eval_every=2"], timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    logged = [h["env/num_episodes"] for h in results["log_history"] if "env/num_episodes" in h]
    assert logged == [8.0] * results["rollouts"] and results["rollouts"] == 2
    assert [p["rollouts"] for p in results["curve"]] == [0, 2]  # the last evaluation is shared by every rank
