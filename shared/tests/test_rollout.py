"""Rollout collector with scripted generations: rows, lock-step generation calls, invalid actions, env failures."""

import pytest
from faulty_envs import make_faulty_env

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.models import qwen_tokenizer
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import RolloutCollector, episode_metrics


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


class Scripted:
    """A generator that answers each prompt with a scripted text, chosen from the prompt's task."""

    def __init__(self, tok, reply):
        self.tok, self.reply, self.calls, self.batch_sizes = tok, reply, 0, []

    def __call__(self, prompt_ids):
        self.calls += 1
        self.batch_sizes.append(len(prompt_ids))
        texts = [self.reply(self.tok.decode(p)) for p in prompt_ids]
        return [self.tok(t + "<|im_end|>", add_special_tokens=False).input_ids for t in texts], None


def answer_for(tasks):
    def reply(prompt: str) -> str:
        task = next(t for t in tasks if f"Task: {t['instruction']}." in prompt)
        if task["object"] == "soap":
            return "raise</action>"  # the faulty env raises on this action
        if "Previously" in prompt:
            return f"take {task['object']}</action>"
        if task["task_type"] == "fetch" and task["object"] == "hammer":
            return "I am not sure what to do"  # malformed: no closing tag
        return f"go to {task['room']}</action>"

    return reply


def test_collector_rows_and_metrics(tok):
    tasks = [t for t in load_tasks("textrooms", "train", num_tasks=40)][:6]
    with EnvPool(make_faulty_env, num_slots=6, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=3, max_prompt_length=1024)
        gen = Scripted(tok, answer_for(tasks))
        episodes = collector.collect(tasks, [0, 0, 1, 1, 2, 2], [5, 5, 6, 6, 7, 7], gen)
    assert gen.calls == max(len(e.rows) for e in episodes)  # one batched call per turn
    assert gen.batch_sizes[0] == 6
    for ep, task in zip(episodes, tasks, strict=True):
        rows = ep.rows
        assert [r.turn_idx for r in rows] == list(range(len(rows)))
        assert all(r.episode_id == ep.episode_id and r.group_id == ep.group_id for r in rows)
        assert rows[0].prompt_text.endswith("<|im_start|>assistant\n<action>")
        assert rows[0].prompt_ids == tok(rows[0].prompt_text, add_special_tokens=False).input_ids
        if task["object"] == "soap":
            assert ep.failed and ep.stop_reason == "env_error" and all(r.failed for r in rows)
        elif task["task_type"] == "find":
            assert ep.won and len(rows) == 1 and ep.stop_reason == "done"
    metrics = episode_metrics(episodes)
    assert 0.0 <= metrics["env/success_rate"] <= 1.0
    assert metrics["env/num_episodes"] == 6


def test_malformed_output_is_flagged_penalisable_and_still_stepped(tok):
    tasks = load_tasks("textrooms", "train", num_tasks=16)
    task = next(t for t in tasks if t["task_type"] == "fetch")
    with EnvPool(make_faulty_env, num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=3, max_prompt_length=1024)
        episodes = collector.collect([task], [0], [0], Scripted(tok, lambda p: "dance 我 now</action>"))
    ep = episodes[0]
    assert len(ep.rows) == 3 and ep.stop_reason == "turn_limit" and not ep.won
    assert all(not r.is_action_valid for r in ep.rows)
    assert episode_metrics(episodes)["env/invalid_action_ratio"] == 1.0


def test_lock_step_generation_when_this_rank_is_done(tok):
    """A rank whose episodes ended keeps generating (dummy prompt) while other ranks are active."""
    task = next(t for t in load_tasks("textrooms", "train", num_tasks=16) if t["task_type"] == "find")
    with EnvPool(make_faulty_env, num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=4, max_prompt_length=1024)
        gen = Scripted(tok, lambda p: f"go to {task['room']}</action>" if "Task:" in p else "x")
        episodes = collector.collect([task], [0], [0], gen, sync_active=lambda n: n + 1)  # another rank stays active
    assert len(episodes[0].rows) == 1 and gen.calls == 4


def test_prompt_truncation_is_counted(tok):
    task = load_tasks("textrooms", "train", num_tasks=1)[0]
    with EnvPool(make_faulty_env, num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=1, max_prompt_length=16)
        episodes = collector.collect([task], [0], [0], Scripted(tok, lambda p: "go to garage</action>"))
    row = episodes[0].rows[0]
    assert row.prompt_truncated and len(row.prompt_ids) == 16
