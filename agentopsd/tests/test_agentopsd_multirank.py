"""Two CPU processes under DeepSpeed ZeRO-3 (gloo): an AgentOPSD rollout, optimizer step and end-of-run evaluation in
lock-step.

The scripted environment ends episodes after 1 turn on rank 0 and after 1 to 3 turns on rank 1, so the ranks collect
different numbers of rows, and the rows of one episode end up on different ranks after balancing (the belief runs over
the whole episode); each rank hosts it in 2 worker processes, as the paper configs host theirs. The run must finish
before the timeout (a hang fails the test), both ranks must hold the same parameters afterwards, and the update of the
(only) optimizer step must equal, to 1e-5, SGD on the loss that a naive single-process loop computes from the rollout's
rows: student and teacher log-probs row by row without padding, the group prior V_0, the belief multiplier of every row
(`credit.turn_advantages` over each episode, or `credit.token_advantages` per row), then the token-mean over all of the
step's tokens of the clipped policy term, k3 KL and entropy bonus. The GiGPO baseline (`--method gigpo`: `credit=grpo`,
`advantage_mode=gigpo`) runs the same launch: every row's advantage must equal GiGPO computed by plain loops over every
rank's rows (a group's episodes are scored on the rank that played them, before the rows are balanced), and the update
must equal the naive loop's on those advantages.
"""

import json
from importlib.resources import files
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentopsd.config import AgentOPSDConfig
from agentopsd.credit import token_advantages, turn_advantages
from agentrl_shared.models import tiny_qwen3
from agentrl_shared.smoke import launch_two_ranks


SCRIPT = Path(__file__).parent / "multirank" / "agentopsd_two_ranks.py"


def naive_gigpo(rows: list[tuple], gamma: float, w: float) -> list[float]:
    """verl-agent's GiGPO (`core_gigpo.py`, mode mean_norm) over every rank's rows as plain loops. The scripted
    environment shows every episode of a group the same observation at a turn (the task's room, then "Turn t."), so a
    step group is (group, turn); a won episode of L turns returns reward_scale * gamma^(L-1-t) at turn t."""
    length: dict[int, int] = {}
    for *_, (_, episode, turn, _, _) in rows:
        length[episode] = max(length.get(episode, 0), turn + 1)
    table = [(g, t, reward, ret * gamma ** (length[e] - 1 - t)) for *_, (g, e, t, reward, ret) in rows]
    out = []
    for g, t, reward, step_return in table:
        group = [x[2] for x in table if x[0] == g]
        state = [x[3] for x in table if x[0] == g and x[1] == t]
        group_mean = sum(group) / len(group) if len(group) > 1 else 0.0  # a one-row group has mean 0
        out.append(reward - group_mean + w * (step_return - sum(state) / len(state)))
    return out


def naive_reference_update(rows: list[tuple], granularity: str, args: AgentOPSDConfig) -> tuple[dict, list]:
    """One SGD step from the initial weights on the loss of every row, computed row by row without padding; also
    returns each row's advantage after the belief reweighting (a float, or a list per token; GiGPO's with
    `advantage_mode="gigpo"`)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)

    def token_logps(prompt, completion, with_entropy=False):
        prompt, completion = torch.tensor(prompt), torch.tensor(completion)
        logits = model(torch.cat([prompt, completion]).unsqueeze(0)).logits[0]
        logits = logits[len(prompt) - 1 : len(prompt) + len(completion) - 1]  # positions predicting the completion
        logp_all = torch.log_softmax(logits.float(), dim=-1)
        logp = logp_all.gather(1, completion.unsqueeze(1)).squeeze(1)
        return (logp, -(logp_all.exp() * logp_all).sum(-1)) if with_entropy else logp

    def belief_credit() -> list:
        # V_0 per group: mean of each trajectory's first row reward, clamped (compute_group_mean_v0)
        first: dict[int, dict[int, float]] = {}
        for *_, (group, episode, _, reward, _) in rows:
            first.setdefault(group, {}).setdefault(episode, reward)
        v0 = {g: min(max(sum(r.values()) / len(r), 1e-4), 1 - 1e-4) for g, r in first.items()}
        with torch.no_grad():
            delta = [token_logps(t, c) - token_logps(p, c) for p, c, _, _, t, _ in rows]  # teacher - student, per row
        credit: list = [None] * len(rows)
        if granularity == "turn":
            for ep in {m[1] for *_, m in rows}:
                idx = sorted((i for i, (*_, m) in enumerate(rows) if m[1] == ep), key=lambda i: rows[i][5][2])
                evidence = torch.stack([delta[i].sum() for i in idx])
                for k, i in enumerate(idx):  # row k gets turn_advantages(A_k, e, V_0)[k]
                    credit[i] = turn_advantages(torch.tensor(rows[i][3]), evidence, v0[rows[i][5][0]])[k].item()
        else:
            for i, (_, c, _, adv, _, m) in enumerate(rows):
                credit[i] = token_advantages(torch.tensor(adv), delta[i], torch.ones(len(c)), v0[m[0]]).tolist()
        return credit

    # GiGPO runs no teacher (its rows have no teacher prompt)
    gigpo = args.advantage_mode == "gigpo"
    credit = naive_gigpo(rows, args.step_gamma, args.step_advantage_w) if gigpo else belief_credit()

    n_tokens = sum(len(c) for _, c, *_ in rows)
    total = 0.0
    for (prompt, completion, *_), adv in zip(rows, credit, strict=True):
        with torch.no_grad():
            l_ref = token_logps(prompt, completion)  # the reference model is the initial policy
        l_s, entropy = token_logps(prompt, completion, with_entropy=True)
        for t in range(len(completion)):
            a = adv[t] if isinstance(adv, list) else adv
            ratio = torch.exp(l_s[t] - l_s[t].detach())  # one optimizer step: theta_old = theta
            pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon_high))
            d = l_ref[t] - l_s[t]
            total = total + pg + args.beta * (torch.exp(d) - d - 1) - args.entropy_coef * entropy[t]
    (total / n_tokens).backward()
    return {name: (p - args.learning_rate * p.grad).detach() for name, p in model.named_parameters()}, credit


@pytest.mark.timeout(1500)  # the launch's own timeout (a hang) comes first; a shared machine can be slow
@pytest.mark.parametrize(
    "granularity, student_logps, method",
    # `generation` (the CPU config's l^S, recorded during HF generation on each rank) against the reference's forward
    [("turn", "recompute", "agentopsd"), ("turn", "generation", "agentopsd"),
     pytest.param("token", "recompute", "agentopsd", marks=pytest.mark.slow), ("turn", "recompute", "gigpo")],
)  # fmt: skip
def test_two_ranks_zero3_rollout_step_and_final_eval_match_a_naive_loop(tmp_path, granularity, student_logps, method):
    out = tmp_path / "run"
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    gigpo = ["trainer.credit=grpo", "trainer.advantage_mode=gigpo"] if method == "gigpo" else []
    proc = launch_two_ranks(out, [str(SCRIPT), str(out), str(ds), f"trainer.granularity={granularity}",
                                  f"trainer.student_logps={student_logps}", *gigpo])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["num_processes"] == 2 and results["rollouts"] == 1 and results["steps"] == 1
    assert results["final"]["num_episodes"] == 3  # end-of-run evaluation ran (on both ranks, or it would hang)
    records = [json.loads(line) for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert [r["rollouts"] for r in records] == [1, 1, 1]  # the last rollout's evaluation, per episode, written once
    assert [p["rollouts"] for p in results["curve"]] == [1]  # reused as the final one (no second evaluation)
    log = next(h for h in results["log_history"] if "env/num_episodes" in h)
    assert log["env/num_episodes"] == 8  # 4 episodes per rank, reduced over ranks
    assert ("agentopsd/v0_mean" in log) == (method == "agentopsd")  # GiGPO keeps its advantages (no belief)
    for r in range(2):  # every step played in the rank's 2 worker processes, none failed, none moved in
        pool = json.loads((out / f"rank{r}_pool.json").read_text())
        assert pool["workers"] == 2 and pool["pooled_calls"] > 0 and pool["in_process"] is None, pool
        assert pool["failures"] == 0, pool
    # `generation` runs no student forward; GiGPO (credit=grpo) neither student nor teacher forward
    assert ("time/old_logps_s" in log) == (student_logps == "recompute" and method == "agentopsd")

    rows = torch.load(out / "rank0_rows.pt")
    assert rows == torch.load(out / "rank1_rows.pt")  # every rank holds every rank's rows, in the same order
    episode_turns = {}
    for *_, (_, episode, turn, _, _) in rows:
        episode_turns[episode] = max(episode_turns.get(episode, 0), turn + 1)
    assert len(episode_turns) == 8 and max(episode_turns.values()) > 1  # multi-turn episodes on rank 1
    assert log["rollout/rows"] == len(rows)
    ranks = [torch.load(out / f"rank{r}_batches.pt") for r in range(2)]
    real = [int(b["completion_mask"].any(dim=1).sum()) for r in ranks for b in r]
    assert sum(real) == len(rows)  # every row once after balancing, the rest empty micro-batches
    assert len(ranks[0]) == len(ranks[1]) == 8  # same number of micro-batches (forwards) on both ranks
    assert abs(sum(real[:8]) - sum(real[8:])) <= 1  # balanced across ranks

    p0, p1 = (torch.load(out / f"rank{r}_params.pt") for r in range(2))
    assert all(torch.equal(p0[k], p1[k]) for k in p0)
    args = AgentOPSDConfig(output_dir=str(tmp_path), learning_rate=1.0, num_generations=2, use_cpu=True, bf16=False,
                           **({"credit": "grpo", "advantage_mode": "gigpo"} if method == "gigpo" else {}))  # fmt: skip
    expected, credit = naive_reference_update(rows, granularity, args)
    if method == "gigpo":  # the trainer's advantages are GiGPO's, and some step advantage is not 0
        assert [a for _, _, _, a, *_ in rows] == pytest.approx(credit, abs=1e-5)
        assert any(abs(g - a) > 1e-6 for g, a in zip(credit, naive_gigpo(rows, args.step_gamma, 0.0), strict=True))
        assert log["gigpo/step_group_size_mean"] == pytest.approx(len(rows) / len({(m[0], m[2]) for *_, m in rows}))
    else:  # the belief changed some advantage (else this run would not test the reweighting)
        changed = [c != a if isinstance(c, float) else any(abs(x - a) > 1e-6 for x in c)
                   for c, (_, _, _, a, *_) in zip(credit, rows, strict=True)]  # fmt: skip
        assert any(changed)
    # the trainer's micro-batches carry the same advantages (rows matched by prompt and completion ids)
    trained: dict[tuple, list] = {}
    for b in (b for r in ranks for b in r):
        for i in range(b["completion_ids"].size(0)):
            n = int(b["completion_mask"][i].sum())
            if n:
                key = (tuple(b["prompt_ids"][i][b["prompt_mask"][i].bool()].tolist()),
                       tuple(b["completion_ids"][i, :n].tolist()))  # fmt: skip
                a = b["advantages"][i]
                trained.setdefault(key, []).append(torch.as_tensor(a[:n].tolist() if a.dim() else a.item()))
    for (p, c, *_), want in zip(rows, credit, strict=True):
        assert any(torch.allclose(got, torch.tensor(want), atol=1e-5) for got in trained[(tuple(p), tuple(c))])
    initial = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32).state_dict()
    moved = max((p0[k] - initial[k]).abs().max().item() for k in p0)
    assert moved > 1e-3  # the step really moved the weights
    worst = max((p0[k] - expected[k]).abs().max().item() for k in p0)
    assert worst < 1e-5, f"largest difference to the naive reference update: {worst:.2e}"
