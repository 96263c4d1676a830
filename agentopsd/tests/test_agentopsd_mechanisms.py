"""`agentopsd mechanisms`: the results file's fields, the gap from the trainer's forwards against a naive forward,
and the turn weights against the belief recursion written out by hand (tiny model, seconds)."""

import math

from agentopsd.cli import load, main
from agentopsd.mechanisms import analyse, first_wrong_turn, table
from agentopsd.trainer import AgentOPSDTrainer
from agentrl_shared.mechanisms import stack_rows
from agentrl_shared.smoke import check_mechanisms_smoke


def test_mechanisms_writes_its_fields_and_the_weights_are_the_trainers(tmp_path):
    payload, trainer, episodes, logps = check_mechanisms_smoke(main, "agentopsd", "agentopsd", AgentOPSDTrainer, load,
                                                               tmp_path)  # fmt: skip
    for entry in payload["models"].values():
        assert {"turns", "weight", "v0", "two_turn_failed", "failed_blame_on_first_wrong_turn_ratio"} <= set(
            entry["method"]
        )
    assert all(f"\n| {label} | " in table(payload) for label in ("untrained", "grpo", "agentopsd"))
    got = analyse(trainer, episodes, logps)
    student, teacher, mask = stack_rows(logps)
    e = ((teacher - student) * mask).sum(-1).tolist()  # per-turn evidence of the panel's one episode
    (ep,) = episodes
    sign = 1.0 if ep.won else -1.0
    v0 = min(max(10.0 * ep.won, 1e-4), 1 - 1e-4)  # the panel as one group, 10 * won at v0_reward_scale 1
    V, prev, q = [], v0, []
    for k in range(len(e)):  # logit V_k = logit V_0 + sum_{j<=k} e_j, by hand
        v = min(max(1 / (1 + math.exp(-(math.log(v0 / (1 - v0)) + sum(e[: k + 1])))), 1e-6), 1 - 1e-6)
        V.append(v)
        q.append(v - prev)
        prev = v
    mean = sum(q) / len(q)
    std = math.sqrt(sum((x - mean) ** 2 for x in q) / len(q))
    weights = [0.5 + 0.5 * min(max(1 + 0.2 * sign * (x - mean) / (std + 1e-6), 0.8), 1.2) for x in q]
    outcome = "won" if ep.won else "failed"
    for k in range(len(e)):
        turn = got["turns"][f"turn{k + 1}"][outcome]
        assert abs(turn["evidence"]["mean"] - e[k]) < 1e-4
        assert abs(turn["belief"]["mean"] - V[k]) < 1e-6
        assert abs(turn["weight"]["mean"] - weights[k]) < 1e-5


def test_first_wrong_turn_follows_the_solution():
    task = {"task_type": "fetch", "room": "garage", "object": "hammer"}
    assert first_wrong_turn(task, ["go to garage", "take wrench"]) == 1
    assert first_wrong_turn(task, ["go to kitchen", "take apple"]) == 0
    assert first_wrong_turn(task, ["go to garage", "take hammer"]) is None
