"""Multi-turn rollout collector: per-turn rows, verl-agent style (verl-agent's per-step rollout, as vendored in ZJU-REAL/SDAR@8b85c23 `agent_system/multi_turn_rollout/rollout_loop.py`).

All episodes of the rank advance together: each turn builds every active episode's prompt (task, last H turns,
current observation, admissible actions), makes ONE batched generation call, projects the texts to actions (invalid
ones are flagged and still stepped, verl-agent `projection.py`), steps the environments in the worker pool, and
records one `Row` per generation. Every rank makes the same number of generation calls (`prompt_count`), padding its
prompt list with dummy prompts whose results are discarded: HF generation under ZeRO-3 gathers parameters
collectively, and TRL's vLLM server and tensor-parallel colocate paths gather every rank's prompts and hand the
results back by rank offset (`process_index * len(prompts)`, trl `generation/vllm_generation.py`), which is right only
when every rank sends as many prompts. A crashed or hung environment ends its episode as failed; the run goes on.
"""

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
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
    prompt_text: str  # the chat-templated prompt
    completion_text: str
    action: str
    is_action_valid: bool
    group_id: int
    episode_id: int
    turn_idx: int
    prompt_truncated: bool = False
    failed: bool = False  # set on every row of an episode whose environment crashed or timed out
    teacher_prompt_ids: list[int] | None = None  # the same turn's prompt through `teacher_transform` (SDAR)
    teacher_prompt_truncated: bool = False
    reward: float = 0.0  # the row's reward as the trainer scored it (`MultiTurnGRPOTrainer._score`)
    episode_return: float = 0.0  # its episode's return before per-row shaping
    role: str = "act"  # which part of the policy wrote it: SkillRise "play"/"curate", EnvACE "caller"/"simulator"
    sampling_logps: list[float] | None = None  # the engine's log-probs of `completion_ids` (vLLM; None from HF)
    anchor: str = ""  # the raw observation the row acted on, no history (GiGPO's anchor state, `core_gigpo.py`)


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
        teacher_transform (`Callable[[str, dict], str]`, *optional*): a second rewrite of the same turn's prompt,
            tokenised and truncated like the student's and recorded as `Row.teacher_prompt_ids` (e.g. SDAR's
            skill-conditioned teacher), so the trainer never re-tokenises prompts after the rollout.
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
        teacher_transform: Callable[[str, dict], str] | None = None,
    ):
        self.pool, self.prompt, self.tokenizer = pool, prompt, tokenizer
        self.max_turns, self.max_prompt_length = max_turns, max_prompt_length
        self.prompt_transform, self.teacher_transform = prompt_transform, teacher_transform
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.timings: Counter = Counter()

    def prompt_text(self, task_text: str, history: list[Turn], observation: str, admissible: list[str]) -> str:
        """The chat-templated text of one turn's prompt, ending with the family's assistant prefix."""
        user = self.prompt.render(task_text, history, observation, admissible)
        text = self.tokenizer.apply_chat_template(
            chat_messages(self.prompt, user), tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        return text + self.prompt.assistant_prefix

    def _tokenize(self, text: str) -> tuple[list[int], bool]:
        """Token ids of a prompt, left-truncated to `max_prompt_length` (verl-agent `truncation="left"`)."""
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        return ids[-self.max_prompt_length :], len(ids) > self.max_prompt_length

    def collect(
        self,
        tasks: list[dict],
        group_ids: list[int],
        seeds: list[int],
        generate: GenerateFn,
        prompt_count: Callable[[int], int] = lambda n: n,
        episode_offset: int = 0,
    ) -> list[Episode]:
        """Play one episode per task (slot i plays task i) until all are done or hit `max_turns`.

        `prompt_count(n_active)` returns how many prompts this rank sends this turn (the same on every rank in a
        multi-rank run, see `equal_prompt_count`); the prompts beyond `n_active` are dummies whose results are
        discarded. The loop ends when it returns 0.
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
            n_prompts = prompt_count(len(active))
            if n_prompts == 0:
                break
            texts, ids, truncated, teacher = [], [], [], []
            for i in active:
                step = current[i]
                task_text = step.info.get("instruction") or episodes[i].task.get("instruction", "")
                text = self.prompt_text(task_text, histories[i], step.observation, step.info["admissible_actions"])
                if self.prompt_transform is not None:
                    text = self.prompt_transform(text, episodes[i].task)
                tok, cut = self._tokenize(text)
                texts.append(text)
                ids.append(tok)
                truncated.append(cut)
                if self.teacher_transform is not None:
                    teacher.append(self._tokenize(self.teacher_transform(text, episodes[i].task)))
            dummies = [[self.tokenizer.pad_token_id]] * (n_prompts - len(active))
            t0 = time.perf_counter()
            completions, logps = generate(ids + dummies)  # the dummies' completions are dropped below
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
                        prompt_text=texts[k],
                        completion_text=completion_text,
                        action=action,
                        is_action_valid=valid,
                        group_id=episodes[i].group_id,
                        episode_id=episodes[i].episode_id,
                        turn_idx=turn,
                        prompt_truncated=truncated[k],
                        teacher_prompt_ids=teacher[k][0] if teacher else None,
                        teacher_prompt_truncated=teacher[k][1] if teacher else False,
                        sampling_logps=None if logps is None else list(logps[k]),
                        anchor=current[i].observation,
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


def collect_with_retries(
    collector: RolloutCollector,
    tasks: list[dict],
    group_ids: list[int],
    seeds: list[int],
    generate: GenerateFn,
    prompt_count: Callable[[int], int],
    episode_offset: int,
    retries: int,
    total_over_ranks: Callable[[int], int],
) -> list[Episode]:
    """`collector.collect`, then each failed episode (environment crash or timeout) played again from the start in a
    fresh environment (the pool rebuilds an environment that raised or died), up to `retries` more times; an episode
    that still fails stays failed. The retry rounds are collective: every rank plays a round (its own failed
    episodes, or none while another rank has some) until no rank has a failed episode (`total_over_ranks`: the sum of
    an int over ranks). A replayed episode keeps its task, seed, group and episode id. `retries=0` is the official
    behaviour (no handling; tinker-cookbook PR #497 retries)."""
    episodes = collector.collect(tasks, group_ids, seeds, generate, prompt_count, episode_offset=episode_offset)
    for _ in range(retries):
        failed = [i for i, e in enumerate(episodes) if e.failed]
        if total_over_ranks(len(failed)) == 0:
            break
        again = collector.collect([tasks[i] for i in failed], [group_ids[i] for i in failed],
                                  [seeds[i] for i in failed], generate, prompt_count)  # fmt: skip
        for i, ep in zip(failed, again, strict=True):
            ep.episode_id = episodes[i].episode_id
            for row in ep.rows:
                row.episode_id = ep.episode_id
            episodes[i] = ep
    return episodes


def equal_prompt_count(local: int, counts: Iterable[int], equal_lists: bool) -> int:
    """Prompts this rank sends this turn, given its active-episode count and every rank's (`counts`).

    0 when no rank has an active episode. With `equal_lists` (TRL's vLLM server mode and colocate with tensor
    parallel > 1, which hand results back by rank offset) every rank sends the largest count; otherwise a rank sends
    its own count, and one dummy while another rank is still active (ZeRO-3 generation is collective).
    """
    counts = list(counts)
    if max(counts) == 0:
        return 0
    return max(counts) if equal_lists else max(local, 1)


def episode_counts(episodes: list[Episode]) -> dict[str, float]:
    """Sums over episodes and rows (add them over ranks, then `metrics_from_counts`)."""
    ok = [e for e in episodes if not e.failed]
    rows = [r for e in episodes for r in e.rows]
    out = Counter(
        {
            "episodes": len(episodes),
            "ok": len(ok),
            "won": sum(e.won for e in ok),
            "failed": sum(e.failed for e in episodes),
            "ok_turns": sum(len(e.rows) for e in ok),
            "rows": len(rows),
            "invalid_rows": sum(not r.is_action_valid for r in rows),
            "truncated_rows": sum(r.prompt_truncated for r in rows),
        }
    )
    for e in episodes:
        out[f"stop/{e.stop_reason}"] += 1
    groups: dict[int, list[bool]] = defaultdict(list)
    for e in ok:
        out[f"type/{e.task.get('task_type')}/episodes"] += 1
        out[f"type/{e.task.get('task_type')}/won"] += e.won
        groups[e.group_id].append(e.won)
    # groups whose episodes all failed or all won: GRPO's advantage is 0 on every row there (a group is on one rank)
    out["groups"] += len(groups)
    out["all_fail_groups"] += sum(not any(w) for w in groups.values())
    out["all_won_groups"] += sum(all(w) for w in groups.values())
    return dict(out)


def metrics_from_counts(counts: dict[str, float], prefix: str = "env") -> dict[str, float]:
    """Success rate overall and per task type, turns, invalid-action ratio, failures and stop reasons.

    Failed episodes (environment crash or timeout) count in `env/failed_ratio` and are left out of success rates.
    """
    n, ok, rows = counts.get("episodes", 0), counts.get("ok", 0), counts.get("rows", 0)
    out = {
        f"{prefix}/success_rate": counts.get("won", 0) / max(ok, 1),
        f"{prefix}/num_episodes": float(n),
        f"{prefix}/failed_ratio": counts.get("failed", 0) / max(n, 1),
        f"{prefix}/turns_mean": counts.get("ok_turns", 0) / max(ok, 1),
        f"{prefix}/invalid_action_ratio": counts.get("invalid_rows", 0) / max(rows, 1),
        f"{prefix}/prompt_truncated_ratio": counts.get("truncated_rows", 0) / max(rows, 1),
    }
    out[f"{prefix}/all_fail_group_ratio"] = counts.get("all_fail_groups", 0) / max(counts.get("groups", 0), 1)
    out[f"{prefix}/all_won_group_ratio"] = counts.get("all_won_groups", 0) / max(counts.get("groups", 0), 1)
    for reason in ("done", "turn_limit", "env_error"):
        out[f"{prefix}/stop/{reason}"] = counts.get(f"stop/{reason}", 0) / max(n, 1)
    for key in sorted(k for k in counts if k.startswith("type/") and k.endswith("/episodes")):
        task_type = key.split("/")[1]
        out[f"{prefix}/{task_type}_success_rate"] = counts[f"type/{task_type}/won"] / counts[key]
    return out


def episode_metrics(episodes: list[Episode], prefix: str = "env") -> dict[str, float]:
    """`metrics_from_counts` of one list of episodes (one rank, or every rank's gathered)."""
    return metrics_from_counts(episode_counts(episodes), prefix)
