"""`agentopsd mechanisms`: what AgentOPSD's belief acts on, measured on the CPU task before and after training.

The shared check (`agentrl_shared.mechanisms`: student and skill-conditioned teacher success on the panel, the
teacher-student log-prob gap on the student's tokens from the trainer's own forwards) plus AgentOPSD's derived
quantities from those gaps, computed by the trainer's own credit path (`AgentOPSDTrainer._credit` and `_v0`,
`credit.belief_increments`; official `verl/trainer/ppo/opsd_utils.py`): the per-turn evidence e_k, the belief
V_k = sigmoid(logit V_0 + sum_{j<=k} e_j) and the advantage weight A_hat_k / A = (1 - lam) + lam * m_k.

A panel episode has no group of G rollouts, so it stands in for a row of a mixed group (the only groups whose GRPO
advantage is non-zero): A = +1 on won episodes, -1 on failed ones (the weight depends on sign(A) only), and V_0 from
the whole panel as one group (`group_mean_v0`: saturated at 1 - 1e-4 at the official reward scale, as in any mixed
training group).
"""

from pathlib import Path

import torch

from agentrl_shared.envs.textrooms import solution_actions
from agentrl_shared.mechanisms import (
    checkpoints,
    distribution,
    fmt,
    mechanisms_table,
    row_labels,
    run_mechanisms,
    stack_rows,
)

from .credit import belief_increments


def first_wrong_turn(task: dict, actions: list[str]) -> int | None:
    """The first turn whose action is not the TextRooms solution's (`solution_actions`), or None."""
    solution = solution_actions(task)
    for k, action in enumerate(actions):
        if k >= len(solution) or action.strip().lower() != solution[k]:
            return k
    return None


def analyse(trainer, episodes, logps) -> dict:
    """Turn evidence, belief, weights per turn (won / failed episodes), their spread over the turns of 2-turn
    episodes, and how often a failed 2-turn episode's larger weight (its most blamed turn) is its first wrong turn."""
    student, teacher, mask = stack_rows(logps)  # (N, C) each
    rows, won, turn = row_labels(episodes)
    delta = teacher - student  # (N, C)
    scored, _ = trainer._score(episodes)  # row rewards as training scores them (10 * won - penalty)
    episode_idx = torch.tensor([i for i, e in enumerate(episodes) for _ in e.rows])
    meta = {
        "advantages": torch.where(won, 1.0, -1.0),
        "rewards": torch.tensor([r.reward for r in scored]).float(),
        "returns": torch.tensor([r.episode_return for r in scored]).float(),
        "group_ids": torch.zeros(len(rows), dtype=torch.long),
        "episode_ids": episode_idx,
        "turn_idx": turn,
        "ok": torch.tensor([not r.failed for r in rows], dtype=torch.bool),
    }
    credit = trainer._credit(meta, delta, mask)  # (N,) turn, (N, C) token granularity
    weight = credit / meta["advantages"] if credit.dim() == 1 else (credit * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    v0 = trainer._v0(meta)
    evidence = (delta * mask).sum(-1)  # (N,) e_k
    belief = torch.zeros(len(rows))
    for i in range(len(episodes)):
        idx = torch.nonzero(episode_idx == i).flatten()
        idx = idx[torch.argsort(turn[idx])]
        if idx.numel():
            belief[idx] = belief_increments(evidence[idx], v0[idx[0]], gamma=trainer.args.belief_decay_gamma)[0]
    out: dict = {"granularity": trainer.args.granularity, "v0": distribution(v0), "turns": {}}
    for k in sorted(set(turn.tolist())):
        at = turn == k
        out["turns"][f"turn{k + 1}"] = {
            name: {"evidence": distribution(evidence[at & keep]), "belief": distribution(belief[at & keep]),
                   "weight": distribution(weight[at & keep])}
            for name, keep in (("won", won), ("failed", ~won))
        }  # fmt: skip
    out["weight"] = distribution(weight)
    # 2-turn episodes: which turn gets the larger weight; on failed ones, is it the first wrong turn
    spread, first_up, blamed_wrong = {"won": [], "failed": []}, {"won": [], "failed": []}, []
    for i, e in enumerate(episodes):
        idx = torch.nonzero(episode_idx == i).flatten()
        if idx.numel() != 2:
            continue
        w = weight[idx[torch.argsort(turn[idx])]]
        name = "won" if e.won else "failed"
        spread[name].append((w[0] - w[1]).abs().item())
        first_up[name].append(float(w[0] > w[1]))
        if not e.won and trainer.env_config.name == "textrooms":
            wrong = first_wrong_turn(e.task, [r.action for r in e.rows])
            blamed_wrong.append(float(wrong is not None and int(torch.argmax(w)) == wrong and w[0] != w[1]))
    for name in ("won", "failed"):
        out[f"two_turn_{name}"] = {"episodes": len(spread[name]),
                                   "weight_spread": distribution(torch.tensor(spread[name])),
                                   "turn1_weighted_more_ratio": distribution(torch.tensor(first_up[name]))["mean"]}  # fmt: skip
    out["failed_blame_on_first_wrong_turn_ratio"] = distribution(torch.tensor(blamed_wrong))["mean"]
    return out


def mechanisms(config: str, runs: Path, seed: int, output: Path, overrides: list[str]) -> dict:
    """The check on the untrained model (the config's), GRPO-final and AgentOPSD-final of `runs` (`<runs>/cpu/
    <method>/seed<seed>/final`), each with the AgentOPSD config (its teacher prompt and credit) and only the model
    swapped."""
    from agentrl_shared.cli import cpu_precision

    from .cli import CPU_CONFIG, load
    from .trainer import AgentOPSDTrainer

    if config == CPU_CONFIG:  # the CPU plan's checkpoints, in the plan's precision (recorded in the command)
        overrides = [*cpu_precision(overrides), *overrides]

    trained = checkpoints(runs, "agentopsd", seed)  # the before / after pair first, GRPO-final last
    models = {
        "untrained": load(config, overrides)["model"].name_or_path,
        "agentopsd": trained["agentopsd"],
        "grpo": trained["grpo"],
    }
    command = ["agentopsd", "mechanisms", "--config", config, "--runs", str(runs), "--seed", str(seed), "--output",
               str(output), *overrides]  # fmt: skip
    return run_mechanisms(AgentOPSDTrainer, lambda extra: load(config, [*overrides, *extra]), models, analyse, output,
                          command)  # fmt: skip


def table(payload: dict | None) -> str:
    """The README's mechanisms table (`agentopsd report`)."""

    def per_turn(key: str, outcome: str, digits: int = 2):
        def cell(e):
            turns = e["method"]["turns"]
            return " / ".join(fmt(turns[t][outcome][key]["mean"], digits) for t in sorted(turns))

        return cell

    return mechanisms_table(payload, ["untrained", "grpo", "agentopsd"], [
        ("turn evidence e_k, won (turn 1 / 2)", per_turn("evidence", "won")),
        ("turn evidence e_k, failed (turn 1 / 2)", per_turn("evidence", "failed")),
        ("belief V_k, failed (turn 1 / 2)", per_turn("belief", "failed", 4)),
        ("weight A_hat/A, won (turn 1 / 2)", per_turn("weight", "won")),
        ("weight A_hat/A, failed (turn 1 / 2)", per_turn("weight", "failed")),
        ("2-turn failed: weight spread / blame on first wrong turn %", lambda e: (
            f"{fmt(e['method']['two_turn_failed']['weight_spread']['mean'])} / "
            f"{fmt(100 * e['method']['failed_blame_on_first_wrong_turn_ratio'], 1)} "
            f"(n = {e['method']['two_turn_failed']['episodes']})")),
    ])  # fmt: skip
