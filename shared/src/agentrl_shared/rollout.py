"""Multi-turn rollout collector: per-turn rows, verl-agent style (trl-notes 16.1, 16.7; architecture.md data flow).

All episodes of the rank advance together: each turn builds every active episode's prompt (task, last H turns,
current observation, admissible actions), makes ONE batched generation call, projects the texts to actions (invalid
ones are flagged and still stepped, verl-agent `projection.py`), steps the environments in the worker pool, and
records one `Row` per generation. Every rank makes the same number of generation calls (`sync_active`), generating
for a dummy prompt when it has nothing active, because vLLM server mode and ZeRO-3 gathers are collective
(trl-notes 7.4, 4.1 trap 4). A crashed or hung environment ends its episode as failed; the run goes on.
"""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .envs.base import EnvFailure
from .envs.pool import EnvPool
from .prompts import Turn, chat_messages


# generate(prompt_ids) -> (completion_ids, sampling log-probs or None): one call for all active episodes of a turn
GenerateFn = Callable[[list[list[int]]], tuple[list[list[int]], list[list[float]] | None]]


@dataclass
class Row:
    """One generation: the turn's prompt and completion plus the metadata the papers need."""

    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logps: list[float] | None
    prompt_text: str  # the chat-templated prompt (SDAR's teacher prepends skills to it)
    completion_text: str
    action: str
    is_action_valid: bool
    group_id: int
    episode_id: int
    turn_idx: int
    role: str = "act"
    prompt_truncated: bool = False
    failed: bool = False  # set on every row of an episode whose environment crashed or timed out


@dataclass
class Episode:
    """One episode: its rows, per-turn environment rewards and how it ended (`stop_reason`)."""

    episode_id: int
    group_id: int
    task: dict
    seed: int
    rows: list[Row] = field(default_factory=list)
    env_rewards: list[float] = field(default_factory=list)
    won: bool = False
    failed: bool = False
    error: str | None = None
    stop_reason: str = "running"  # done | turn_limit | env_error
    info: dict = field(default_factory=dict)  # the last step's info (task_type, task_score, ...)

    @property
    def env_return(self) -> float:
        return float(sum(self.env_rewards))


class RolloutCollector:
    """Runs episodes of one environment family with one prompt family.

    Args:
        pool (`EnvPool`): environments, one slot per concurrent episode.
        prompt: a prompt family from `agentrl_shared.prompts.make_prompt`.
        tokenizer: the policy's tokenizer (chat template applied here, never re-tokenising generated text).
        max_turns (`int`): turn limit per episode (verl-agent `env.max_steps`).
        max_prompt_length (`int`): prompts longer than this are left-truncated and counted
            (verl-agent `data.max_prompt_length`).
        prompt_transform (`Callable[[str, dict], str]`, *optional*): rewrites the templated prompt text of a task
            (e.g. a Skill-GRPO baseline that puts skills in the student prompt).
        chat_template_kwargs (`dict`, *optional*): e.g. `{"enable_thinking": False}` for Qwen3.
    """

    def __init__(
        self,
        pool: EnvPool,
        prompt,
        tokenizer,
        max_turns: int,
        max_prompt_length: int,
        prompt_transform: Callable[[str, dict], str] | None = None,
        chat_template_kwargs: dict | None = None,
    ):
        self.pool, self.prompt, self.tokenizer = pool, prompt, tokenizer
        self.max_turns, self.max_prompt_length = max_turns, max_prompt_length
        self.prompt_transform = prompt_transform
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.timings: Counter = Counter()

    def prompt_text(self, task_text: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        """The chat-templated text of one turn's prompt, ending with the family's assistant prefix."""
        user = self.prompt.render(task_text, history, observation, admissible)
        text = self.tokenizer.apply_chat_template(
            chat_messages(self.prompt, user), tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        return text + self.prompt.assistant_prefix

    def collect(
        self,
        tasks: list[dict],
        group_ids: list[int],
        seeds: list[int],
        generate: GenerateFn,
        sync_active: Callable[[int], int] = lambda n: n,
        episode_offset: int = 0,
    ) -> list[Episode]:
        """Play one episode per task (slot i plays task i) until all are done or hit `max_turns`.

        `sync_active(n_local)` returns the number of active episodes over all ranks; the loop runs while it is > 0.
        """
        if len(tasks) > self.pool.num_slots:
            raise ValueError(f"{len(tasks)} episodes but the pool has {self.pool.num_slots} slots; raise num_slots.")
        episodes = [
            Episode(episode_offset + i, g, t, s)
            for i, (t, g, s) in enumerate(zip(tasks, group_ids, seeds, strict=True))
        ]
        histories: list[list[Turn]] = [[] for _ in episodes]
        t0 = time.perf_counter()
        first = self.pool.reset(list(range(len(tasks))), tasks, seeds)
        self.timings["env_s"] += time.perf_counter() - t0
        current = {}
        for i, step in enumerate(first):
            if isinstance(step, EnvFailure):
                self._fail(episodes[i], str(step))
            else:
                current[i] = step
        for turn in range(self.max_turns):
            active = [i for i in current if episodes[i].stop_reason == "running"]
            if sync_active(len(active)) == 0:
                break
            texts, ids, truncated = [], [], []
            for i in active:
                step = current[i]
                task_text = step.info.get("instruction") or episodes[i].task.get("instruction", "")
                text = self.prompt_text(task_text, histories[i], step.observation, step.info["admissible_actions"])
                if self.prompt_transform is not None:
                    text = self.prompt_transform(text, episodes[i].task)
                tok = self.tokenizer(text, add_special_tokens=False).input_ids
                truncated.append(len(tok) > self.max_prompt_length)
                texts.append(text)
                ids.append(tok[-self.max_prompt_length :])
            t0 = time.perf_counter()
            # keep every rank's generation calls in lock-step: a rank with nothing active generates for a dummy
            completions, logps = generate(ids if ids else [[self.tokenizer.pad_token_id]])
            self.timings["generate_s"] += time.perf_counter() - t0
            if not active:
                continue
            actions, rows = [], []
            for k, i in enumerate(active):
                completion_text = self.tokenizer.decode(completions[k], skip_special_tokens=True)
                action, valid = self.prompt.project(completion_text)
                actions.append(action)
                rows.append(
                    Row(
                        prompt_ids=ids[k],
                        completion_ids=list(completions[k]),
                        sampling_logps=None if logps is None else list(logps[k]),
                        prompt_text=texts[k],
                        completion_text=completion_text,
                        action=action,
                        is_action_valid=valid,
                        group_id=episodes[i].group_id,
                        episode_id=episodes[i].episode_id,
                        turn_idx=turn,
                        prompt_truncated=truncated[k],
                    )
                )
            t0 = time.perf_counter()
            results = self.pool.step(active, actions)
            self.timings["env_s"] += time.perf_counter() - t0
            for k, i in enumerate(active):
                ep, result = episodes[i], results[k]
                ep.rows.append(rows[k])
                if isinstance(result, EnvFailure):
                    self._fail(ep, str(result))
                    continue
                # (observation acted on, action, what it returned): Search shows each search with its own result
                histories[i].append(Turn(current[i].observation, actions[k], result.observation))
                current[i] = result
                ep.env_rewards.append(result.reward)
                ep.won, ep.info = bool(result.info.get("won", False)), result.info
                if result.done:
                    ep.stop_reason = "done"
        for ep in episodes:
            if ep.stop_reason == "running":
                ep.stop_reason = "turn_limit"
        return episodes

    @staticmethod
    def _fail(ep: Episode, message: str) -> None:
        ep.failed, ep.error, ep.stop_reason, ep.won = True, message, "env_error", False
        for row in ep.rows:
            row.failed = True


def episode_metrics(episodes: list[Episode], prefix: str = "env") -> dict[str, float]:
    """Success rate overall and per task type, turns, invalid-action ratio, failures and stop reasons.

    Failed episodes (environment crash or timeout) count in `env/failed_ratio` and are left out of success rates.
    """
    ok = [e for e in episodes if not e.failed]
    rows = [r for e in episodes for r in e.rows]
    out = {
        f"{prefix}/success_rate": sum(e.won for e in ok) / max(len(ok), 1),
        f"{prefix}/num_episodes": float(len(episodes)),
        f"{prefix}/failed_ratio": sum(e.failed for e in episodes) / max(len(episodes), 1),
        f"{prefix}/turns_mean": sum(len(e.rows) for e in ok) / max(len(ok), 1),
        f"{prefix}/invalid_action_ratio": sum(not r.is_action_valid for r in rows) / max(len(rows), 1),
        f"{prefix}/prompt_truncated_ratio": sum(r.prompt_truncated for r in rows) / max(len(rows), 1),
    }
    for reason in ("done", "turn_limit", "env_error"):
        out[f"{prefix}/stop/{reason}"] = sum(e.stop_reason == reason for e in episodes) / max(len(episodes), 1)
    for task_type in sorted({str(e.task.get("task_type")) for e in ok}):
        group = [e for e in ok if str(e.task.get("task_type")) == task_type]
        out[f"{prefix}/{task_type}_success_rate"] = sum(e.won for e in group) / len(group)
    return out
