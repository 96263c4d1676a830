"""Two CPU processes under DeepSpeed ZeRO-3 (gloo): SkillRise rollout, optimizer step and the evaluation on the last
rollout in lock-step.

The scripted environment ends episodes after 1 turn on rank 0 and after 1 or 3 turns on rank 1, so the ranks collect
different numbers of rows (solve turns and curate rows), each rank hosting it in 2 worker processes; the evaluation
panel holds one trial per mode, so rank 1's chunk is empty. The run must finish before the timeout (a hang fails the
test), every collected row must be trained once, each rank must send its own prompt count per generation (one dummy
while the other rank works), not the sum over ranks, both ranks must hold the same parameters afterwards, and the
update of the (only) optimizer step must equal, to 1e-5, SGD on the loss that a naive single-process loop computes
over the same rows: token-mean over all of the step's tokens of the clipped policy term and the entropy bonus.
"""

import json
from importlib.resources import files
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import launch_two_ranks
from skillrise.config import SkillRiseConfig


SCRIPT = Path(__file__).parent / "multirank" / "run_two_ranks.py"


def naive_reference_update(batches: list[dict], args: SkillRiseConfig) -> dict[str, torch.Tensor]:
    """One SGD step on the loss of every real row, computed row by row without padding, from the initial weights."""
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)
    rows = []
    for b in batches:
        for i in range(b["prompt_ids"].size(0)):
            m = b["completion_mask"][i].bool()
            if m.any():
                prompt = b["prompt_ids"][i][b["prompt_mask"][i].bool()]
                rows.append((prompt, b["completion_ids"][i][m], b["advantages"][i].item()))
    n_tokens = sum(len(c) for _, c, _ in rows)

    total = 0.0
    for prompt, completion, adv in rows:
        logits = model(torch.cat([prompt, completion]).unsqueeze(0)).logits[0]
        logits = logits[len(prompt) - 1 : len(prompt) + len(completion) - 1]  # positions predicting the completion
        logp_all = torch.log_softmax(logits.float(), dim=-1)
        l_s = logp_all.gather(1, completion.unsqueeze(1)).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        for t in range(len(completion)):
            ratio = torch.exp(l_s[t] - l_s[t].detach())  # one optimizer step: theta_old = theta
            pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon_high))
            if adv < 0:
                pg = torch.minimum(pg, torch.tensor(-adv * args.delta))
            total = total + pg - args.entropy_coef * entropy[t]
    (total / n_tokens).backward()
    return {name: (p - args.learning_rate * p.grad).detach() for name, p in model.named_parameters()}


def test_two_ranks_zero3_rollout_step_and_last_evaluation_match_a_naive_loop(tmp_path):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    proc = launch_two_ranks(out, [str(SCRIPT), str(out), str(ds)], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["num_processes"] == 2 and results["rollouts"] == 1 and results["steps"] == 1
    # the evaluation of the last rollout is the final one, shared by both ranks (rank 1 played an empty chunk)
    assert [p["rollouts"] for p in results["curve"]] == [1]
    assert results["final"]["repeat"]["num_trials"] == 1 and results["final"]["cross"]["num_trials"] == 1
    records = [json.loads(line) for line in (out / "eval_trials.jsonl").read_text().splitlines()]
    # that evaluation's trials, one per panel group and mode, written once (by the main process only)
    assert sorted((r["rollouts"], r["mode"]) for r in records) == [(1, "cross"), (1, "repeat")]
    log = next(h for h in results["log_history"] if "env/num_episodes" in h)
    assert log["env/num_episodes"] == 16  # 4 trials x K 2 tasks per rank, reduced over ranks
    # rank 0: 4 trials x (1 + 1 curate + 1); rank 1: groups with seeds 2 and 3, 2 x (3 + 1 + 3) + 2 x (1 + 1 + 1)
    assert log["rollout/rows"] == 32 and log["rollout/optimizer_steps"] == 1

    counts = [json.loads((out / f"rank{r}_counts.json").read_text()) for r in range(2)]
    assert [c["collected_rows"] for c in counts] == [12, 20]
    for r in range(2):  # steps played in the rank's 2 worker processes, none failed
        pool = json.loads((out / f"rank{r}_pool.json").read_text())
        assert pool["workers"] == 2 and pool["pooled_calls"] > 0 and pool["failures"] == 0, pool
    ranks = [torch.load(out / f"rank{r}_batches.pt") for r in range(2)]
    real = [int(b["completion_mask"].any(dim=1).sum()) for r in ranks for b in r]
    assert sum(real) == 32  # every collected row trained exactly once (16 per rank after balancing)
    assert len(ranks[0]) == len(ranks[1]) == 4  # same number of micro-batches (forwards) on both ranks

    # lock-step generation: the same calls on both ranks; each sends its own count, or one dummy while the other
    # rank still works (no TP / server mode here), never the sum over ranks
    calls0, calls1 = counts[0]["prompt_counts"], counts[1]["prompt_counts"]
    assert len(calls0) == len(calls1)
    for (own0, sent0), (own1, sent1) in zip(calls0, calls1, strict=True):
        busy = max(own0, own1) > 0
        assert (sent0, sent1) == ((max(own0, 1), max(own1, 1)) if busy else (0, 0))
    assert any(own0 > 1 and own1 > 1 for (own0, _), (own1, _) in zip(calls0, calls1, strict=True))

    p0, p1 = (torch.load(out / f"rank{r}_params.pt") for r in range(2))
    assert all(torch.equal(p0[k], p1[k]) for k in p0)
    args = SkillRiseConfig(output_dir=str(tmp_path), learning_rate=1.0, use_cpu=True, bf16=False)
    expected = naive_reference_update([b for r in ranks for b in r], args)
    initial = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32).state_dict()
    moved = max((p0[k] - initial[k]).abs().max().item() for k in p0)
    assert moved > 1e-3  # the step really moved the weights
    worst = max((p0[k] - expected[k]).abs().max().item() for k in p0)
    assert worst < 1e-5, f"largest difference to the naive reference update: {worst:.2e}"
