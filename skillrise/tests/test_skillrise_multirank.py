"""Two CPU processes under DeepSpeed ZeRO-3 (gloo): SkillRise rollout, optimizer step and the evaluation on the last
rollout in lock-step.

The scripted environment ends episodes after 1 turn on rank 0 and after 1 or 3 turns on rank 1, so the ranks collect
different numbers of rows (solve turns and curate rows), each rank hosting it in 2 worker processes; the evaluation
panel holds one trial per mode, so rank 1's chunk is empty. The run must finish before the timeout (a hang fails the
test), every collected row must be trained once, each rank must send its own prompt count per generation (one dummy
while the other rank works), not the sum over ranks, both ranks must hold the same parameters afterwards, and the
update of the (only) optimizer step must equal, to 1e-5, SGD on the loss that a naive single-process loop computes
over the same rows: token-mean over all of the step's tokens of the clipped policy term and the entropy bonus. The
GiGPO baseline (`--method gigpo`: K = 1, no carry, GiGPO advantages) runs the same launch: no step group may span
the ranks, and the logged step-group sizes must be those of both ranks' scored rows, counted by hand (here every step
group holds the N = 4 episodes of its group, on either rank).
"""

import json
from collections import Counter
from importlib.resources import files
from pathlib import Path

import pytest
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


# rows collected per rank, per method. SkillRise: rank 0 4 trials x (1 + 1 curate + 1); rank 1
# groups with seeds 2 and 3, 2 x (3 + 1 + 3) + 2 x (1 + 1 + 1). GiGPO (K = 1, N and trials per rank x 2, no curate):
# rank 0 8 one-turn episodes; rank 1 4 x 3 + 4 x 1 turns
ROWS = {"skillrise": [12, 20], "gigpo": [8, 16]}


@pytest.mark.parametrize("method", ["skillrise", "gigpo"])
def test_two_ranks_zero3_rollout_step_and_last_evaluation_match_a_naive_loop(tmp_path, method):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    proc = launch_two_ranks(out, [str(SCRIPT), str(out), str(ds), method], timeout=900)
    per_rank = ROWS[method]
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
    assert log["env/num_episodes"] == 16  # 8 tasks played per rank (4 trials x K 2, or 8 x K 1), reduced over ranks
    assert log["rollout/rows"] == sum(per_rank) and log["rollout/optimizer_steps"] == 1

    counts = [json.loads((out / f"rank{r}_counts.json").read_text()) for r in range(2)]
    assert [c["collected_rows"] for c in counts] == per_rank
    if method == "gigpo":  # the step groups of both ranks' scored rows, ((group, position), anchor), by hand
        keys = [{tuple(g) for g in c["step_groups"]} for c in counts]
        assert not keys[0] & keys[1]  # a group is scored on the rank that played it: no step group spans the ranks
        sizes = Counter(tuple(g) for c in counts for g in c["step_groups"]).values()
        assert sum(sizes) == sum(per_rank)
        assert log["gigpo/step_group_size_mean"] == pytest.approx(sum(sizes) / len(sizes))
        assert log["gigpo/step_grouped_row_ratio"] == pytest.approx(sum(n for n in sizes if n > 1) / sum(sizes))
    for r in range(2):  # steps played in the rank's 2 worker processes, none failed
        pool = json.loads((out / f"rank{r}_pool.json").read_text())
        assert pool["workers"] == 2 and pool["pooled_calls"] > 0 and pool["failures"] == 0, pool
    ranks = [torch.load(out / f"rank{r}_batches.pt") for r in range(2)]
    real = [int(b["completion_mask"].any(dim=1).sum()) for r in ranks for b in r]
    assert sum(real) == sum(per_rank)  # every collected row trained exactly once (balanced over the ranks)
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
