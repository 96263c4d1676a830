"""The text-environment protocol every adapter implements (after verl-agent `agent_system/environments/base.py`).

An environment is reset with a task (a dict from the family's task loader) and a seed, and stepped with the action
string that the prompt family's projection extracted from the model's text. The same (task, seed) must give the same
start state, so the G members of a GRPO group see the same episode (verl-agent `seed + i // group_n`).

`Step.info` keys every adapter fills:
- `won` (`bool`): the task is solved (success metrics read it at the last step);
- `admissible_actions` (`list[str]`): valid actions now (empty for free-form environments such as Search-QA);
- `task_type` (`str`): task family for per-type success rates (e.g. ALFWorld `pick`, `look`, ...);
- any adapter-specific extras (`task_score` for WebShop, `data_source` for Search-QA, `gamefile` for ALFWorld).
"""

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Step:
    """One environment transition: what the agent sees next, the reward of the last action, and whether it ended."""

    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict = field(default_factory=dict)


class TextEnv(Protocol):
    """reset(task, seed) -> Step; step(action) -> Step; close()."""

    def reset(self, task: dict, seed: int) -> Step: ...

    def step(self, action: str) -> Step: ...

    def close(self) -> None: ...


class EnvFailure(RuntimeError):
    """An environment crashed, raised or timed out; the episode is marked failed and masked from the loss."""
