"""Rollout collector with scripted generations: rows, lock-step generation calls, invalid actions, env failures."""

import pytest
from faulty_envs import make_faulty_env

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.models import qwen_tokenizer
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import RolloutCollector, episode_metrics, equal_prompt_count


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


def test_all_fail_and_all_won_groups_are_counted():
    """Groups 0 (lost, lost), 1 (won, lost), 2 (won, won), 3 (lost, crashed: the crash leaves it out, so all-fail)."""
    from agentrl_shared.rollout import Episode

    outcomes = [(0, False, False), (0, False, False), (1, True, False), (1, False, False), (2, True, False),
                (2, True, False), (3, False, False), (3, False, True)]  # fmt: skip
    episodes = [Episode(i, g, {"task_type": "chain1"}, 0, won=w, failed=f) for i, (g, w, f) in enumerate(outcomes)]
    metrics = episode_metrics(episodes)
    assert metrics["env/all_fail_group_ratio"] == 2 / 4 and metrics["env/all_won_group_ratio"] == 1 / 4


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
        # another rank stays active: this rank keeps sending one dummy prompt
        episodes = collector.collect([task], [0], [0], gen, prompt_count=lambda n: max(n, 1))
    assert len(episodes[0].rows) == 1 and gen.calls == 4 and gen.batch_sizes == [1, 1, 1, 1]


def test_equal_prompt_count():
    assert equal_prompt_count(0, [0, 0], equal_lists=True) == 0
    assert equal_prompt_count(2, [2, 5], equal_lists=True) == 5
    assert equal_prompt_count(0, [0, 5], equal_lists=False) == 1
    assert equal_prompt_count(3, [3, 5], equal_lists=False) == 3


def test_teacher_prompt_ids_are_recorded_by_the_collector(tok):
    task = load_tasks("textrooms", "train", num_tasks=1)[0]
    with EnvPool(make_faulty_env, num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=1, max_prompt_length=1024,
                                     teacher_transform=lambda text, t: "SKILLS\n" + text)  # fmt: skip
        row = collector.collect([task], [0], [0], Scripted(tok, lambda p: "go to garage</action>"))[0].rows[0]
    assert row.teacher_prompt_ids == tok("SKILLS\n" + row.prompt_text, add_special_tokens=False).input_ids
    assert not row.teacher_prompt_truncated


def test_prompt_truncation_is_counted(tok):
    task = load_tasks("textrooms", "train", num_tasks=1)[0]
    with EnvPool(make_faulty_env, num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=1, max_prompt_length=16)
        episodes = collector.collect([task], [0], [0], Scripted(tok, lambda p: "go to garage</action>"))
    row = episodes[0].rows[0]
    assert row.prompt_truncated and len(row.prompt_ids) == 16


class RankOffsetServer:
    """A fake of TRL's vLLM server / tensor-parallel path for ranks run as threads: every rank's prompts are gathered,
    generated in one list, and rank r takes `results[r * len(its prompts) : (r + 1) * len(its prompts)]`."""

    def __init__(self, world, tok, reply):
        import threading

        self.world, self.tok, self.reply = world, tok, reply
        self.barrier = threading.Barrier(world)
        self.slots: list = [None] * world

    def all_gather(self, rank, value):
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def generate(self, rank, prompt_ids):
        everything = [p for part in self.all_gather(rank, prompt_ids) for p in part]
        texts = [self.reply(self.tok.decode(p)) for p in everything]
        results = [self.tok(t + "<|im_end|>", add_special_tokens=False).input_ids for t in texts]
        return results[rank * len(prompt_ids) : (rank + 1) * len(prompt_ids)], None


def test_equal_prompt_lists_keep_completions_on_their_prompts_under_rank_offsets(tok):
    """Ranks with different numbers of active episodes send equal prompt lists (dummies padded, results dropped), so
    the rank-offset hand-back of TRL's vLLM server mode gives every prompt its own completion."""
    from concurrent.futures import ThreadPoolExecutor

    tasks = load_tasks("textrooms", "train", num_tasks=40)
    finds = [t for t in tasks if t["task_type"] == "find"][:2]
    fetches = [t for t in tasks if t["task_type"] == "fetch"][:2]
    per_rank = [finds + fetches[:1], fetches[1:]]  # rank 0: 3 episodes (1 or 2 turns), rank 1: 1 episode (2 turns)

    def reply(prompt: str) -> str:
        task = next((t for t in tasks if f"Task: {t['instruction']}." in prompt), None)
        if task is None:
            return "dummy"
        return f"take {task['object']}</action>" if "Previously" in prompt else f"go to {task['room']}</action>"

    server = RankOffsetServer(2, tok, reply)

    def run(rank):
        with EnvPool(make_faulty_env, num_slots=3, num_workers=0) as pool:
            collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=3, max_prompt_length=1024)
            n = len(per_rank[rank])
            return collector.collect(
                per_rank[rank], list(range(n)), [0] * n,
                lambda ids: server.generate(rank, ids),
                lambda k: equal_prompt_count(k, server.all_gather(rank, k), equal_lists=True),
            )  # fmt: skip

    with ThreadPoolExecutor(2) as ex:
        episodes = list(ex.map(run, [0, 1]))
    for rank_episodes in episodes:
        for ep in rank_episodes:
            assert ep.won, ep.task
            for row in ep.rows:
                assert row.completion_text == reply(row.prompt_text), (row.prompt_text[-80:], row.completion_text)


def test_a_failed_episode_is_replayed_in_a_fresh_environment(tok):
    """`collect_with_retries`: the third task's environment raises on its first turn only (the reply changes once the
    generator has caused a crash), so its replay succeeds, keeps its ids, and the other episodes are played once."""
    from agentrl_shared.rollout import collect_with_retries

    tasks = [t for t in load_tasks("textrooms", "train", num_tasks=40)][:6]
    crashes = []

    def reply(prompt):
        task = next(t for t in tasks if f"Task: {t['instruction']}." in prompt)
        if task is tasks[2] and not crashes:
            crashes.append(task["task_id"])
            return "raise</action>"
        return f"go to {task['room']}</action>"

    with EnvPool(make_faulty_env, num_slots=6, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=1, max_prompt_length=1024)
        args = (tasks, [0, 0, 1, 1, 2, 2], [5, 5, 6, 6, 7, 7], Scripted(tok, reply), lambda n: n, 10)
        episodes = collect_with_retries(collector, *args, retries=1, total_over_ranks=lambda n: n)
        assert crashes and not any(e.failed for e in episodes)
        assert [e.episode_id for e in episodes] == list(range(10, 16))
        assert all(r.episode_id == e.episode_id for e in episodes for r in e.rows)
        crashes.clear()
        kept = collect_with_retries(collector, *args, retries=0, total_over_ranks=lambda n: n)
        assert sum(e.failed for e in kept) == 1  # retries=0: the official behaviour
