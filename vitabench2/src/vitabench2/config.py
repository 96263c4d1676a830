"""`vitabench2 eval --config NAME [key=value ...]`: a YAML file in `vitabench2/configs/` (or a path) whose `run`
section sets the options of `vitabench2 run`, so that every package of the monorepo evaluates with one command shape
(`<pkg> eval --config ... key=value`, `results.json`). Field names are the `run` flags without the dashes
(`--memory-type` -> `memory_type`); defaults are those of `run`, which are the official ones
(meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/config.py`, `src/vita/cli.py`).
"""

import json
from dataclasses import MISSING, dataclass, field, fields
from typing import Literal

from .cli import EVALUATION_TYPES


@dataclass
class EvalConfig:
    """The `run` section of an eval config: one field per `vitabench2 run` option (see `vitabench2 run --help`).

    API keys are never part of a config (they would land in `results.json`): the user and judge read
    `$OPENAI_API_KEY`, as with `run`. `${oc.env:VAR}` in the YAML is the environment variable VAR (endpoints, data folders).
    """

    agent: str = "transformers:smollm2-135m"
    user: str | None = None  # default: the agent's back end
    judge: str | None = None
    max_tokens: int = 4096
    judge_max_tokens: int = 8192
    temperature: float = 0.0
    seed: int = 300
    thinking: Literal["on", "off"] | None = None
    thinking_roles: list[str] = field(default_factory=lambda: ["agent"])
    context_length: int | None = None
    timeout: float = 600.0
    max_new_tokens: int = 256
    max_input_tokens: int = 4096
    offline: bool = False
    memory_type: Literal["null", "groundtruth", "full_context", "rewrite", "rag", "rag_cache"] | None = None
    memory_class: str | None = None
    rag_cache_dir: str | None = None
    memory_kwargs: dict = field(default_factory=dict)
    tasks: str | None = None  # default: the packaged sample
    language: Literal["english", "chinese"] = "english"
    trials: int = 1
    users: list[str] | None = None
    subtasks: list[str] | None = None
    num_users: int | None = None
    holidays: Literal["official", "computed"] = "official"
    shuffle_search: bool = False
    max_steps: int = 300
    max_errors: int | None = None
    concurrency: int = 4
    evaluation_type: str = "trajectory"
    outcome_reward: bool = False
    judge_retries: int = 3
    retry_failed: bool = False
    prices: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.evaluation_type not in EVALUATION_TYPES:
            raise ValueError(f"evaluation_type {self.evaluation_type!r} is not one of {', '.join(EVALUATION_TYPES)}")
        for name in ("trials", "max_steps", "concurrency", "judge_retries"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def run_args(self) -> list[str]:
        """The `vitabench2 run` flags of this config (values equal to `run`'s defaults are left out)."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            default = f.default if f.default_factory is MISSING else f.default_factory()
            if value == default or value is None:
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                out.append(flag)
            elif isinstance(value, list):
                out += [flag, ",".join(map(str, value))]
            elif isinstance(value, dict):
                out += [flag, json.dumps(value)]
            else:
                out += [flag, str(value)]
        return out
