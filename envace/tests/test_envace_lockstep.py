"""Lock-step generation of the two-role rollout on two simulated ranks (threads, one process): the prompt count each
rank sends in a phase (caller or rehearsal) is `MultiTurnGRPOTrainer._prompt_count`'s, i.e. the maximum over ranks
(never the sum) where TRL's vLLM tensor-parallel / server path needs equal prompt lists, and the rank's own count
(one dummy on a rank without work) otherwise; no collected row is dropped or gets another prompt's completion.

The fake generator does what TRL 1.16's colocate path does under `vllm_tensor_parallel_size=2`
(`trl/generation/vllm_generation.py`): all-gather the prompt lists of the TP group, generate for all of them, and
keep the slice `[tp_rank * len(own prompts), (tp_rank + 1) * len(own prompts))`. Rank 0 plays three episodes with
parallel tool calls (several rehearsals per caller turn), rank 1 one, and answers that depend on the prompt text
end some episodes early, so the ranks have different amounts of work in most rehearsal and caller phases and run
out of it at different rounds. The reference is each rank's episodes played alone, without any padding."""

import threading
import zlib

import pytest
from scripted import ScriptedPolicy
from transformers import AutoTokenizer

from agentrl_shared.models import tiny_qwen3
from agentrl_shared.trainer import MultiTurnGRPOTrainer
from envace.data import generate_tasks
from envace.rehearsal import RehearsalCollector
from envace.reward import RuleJudge


WORLD = 2


class PromptPolicy(ScriptedPolicy):
    """The scripted policy with parallel calls, and a plain-text non-answer for a quarter of the prompts, chosen by
    the prompt text (the same answer however the prompts are batched or which rank generates them)."""

    def __init__(self, tok, tasks):
        super().__init__(tok, tasks, parallel=True)

    def answer(self, prompt: str) -> str:
        if zlib.crc32(f"0{prompt}".encode()) % 4 == 0:  # (salt "0": early ends in both roles, on both ranks)
            return "I am not sure what to do."
        return super().answer(prompt)


class Group:
    """An all-gather among the threads that play the ranks."""

    def __init__(self):
        self.barrier = threading.Barrier(WORLD, timeout=60)
        self.slots = [None] * WORLD

    def all_gather(self, rank: int, value) -> list:
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()  # nobody writes the next value before everyone has read this one
        return out


class Rank:
    """What `MultiTurnGRPOTrainer._prompt_count` reads of a trainer, on one simulated rank; records every call."""

    prompt_count = MultiTurnGRPOTrainer._prompt_count  # the trainer's own function, not a copy

    def __init__(self, group: Group, rank: int, equal_prompt_lists: bool):
        self.group, self.rank, self.equal_prompt_lists = group, rank, equal_prompt_lists
        self.log: list[tuple[int, int]] = []  # (own count, prompts sent) per phase, in call order

    def _all_ranks(self, value) -> list:
        return self.group.all_gather(self.rank, value)

    def _prompt_count(self, n: int) -> int:
        sent = Rank.prompt_count(self, n)
        self.log.append((n, sent))
        return sent


@pytest.fixture(scope="module")
def toks():
    """One tokenizer per simulated rank (a tokenizer is not shared across threads)."""
    return [AutoTokenizer.from_pretrained(tiny_qwen3(), padding_side="left") for _ in range(WORLD)]


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(30, seed=11)


def collector(tok) -> RehearsalCollector:
    return RehearsalCollector(tok, RuleJudge(), "agent", max_completion_length=64, max_model_len=8192)


def split(tasks) -> list[list[dict]]:
    return [tasks[:3], tasks[3:4]]  # rank 0: three episodes, rank 1: one


def rows_of(trajs) -> list[list[tuple]]:
    return [[(tuple(r.prompt_ids), tuple(r.completion_ids), r.role) for r in t.rows] for t in trajs]


def play_alone(tok, tasks, rank_tasks):
    policy = PromptPolicy(tok, tasks)
    return collector(tok).collect(rank_tasks, list(range(len(rank_tasks))), policy)


def play_two_ranks(toks, tasks, *, equal_prompt_lists: bool, tensor_parallel: bool):
    """Both ranks' `collect` in lock-step; returns per rank (trajectories or the exception, its `Rank` log)."""
    group, gen_group = Group(), Group()
    out: list = [None] * WORLD

    def work(rank: int) -> None:
        tok, mine = toks[rank], split(tasks)[rank]
        policy, state = PromptPolicy(tok, tasks), Rank(group, rank, equal_prompt_lists)

        def generate(prompts):
            if not tensor_parallel:
                return policy(prompts)
            everyone = [p for part in gen_group.all_gather(rank, prompts) for p in part]
            completions, _ = policy(everyone)  # every TP rank generates for the whole group
            n = len(prompts)
            return completions[rank * n : (rank + 1) * n], None  # TRL's tp_slice: by rank offset x own count

        try:
            trajs = collector(tok).collect(mine, list(range(len(mine))), generate, None, state._prompt_count)
            out[rank] = (trajs, state.log)
        except Exception as exc:  # noqa: BLE001 -- reported to the test, and the other rank released
            out[rank] = (exc, state.log)
            group.barrier.abort()
            gen_group.barrier.abort()

    threads = [threading.Thread(target=work, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def test_tensor_parallel_prompt_counts_are_the_maximum_over_ranks_and_no_row_is_lost(toks, tasks):
    out = play_two_ranks(toks, tasks, equal_prompt_lists=True, tensor_parallel=True)
    (trajs0, log0), (trajs1, log1) = out
    assert not isinstance(trajs0, Exception) and not isinstance(trajs1, Exception), out
    # every row, with its own prompt's completion: the same rows as each rank's episodes played alone
    for rank, trajs in enumerate((trajs0, trajs1)):
        alone = play_alone(toks[rank], tasks, split(tasks)[rank])
        assert rows_of(trajs) == rows_of(alone)
        assert [t.reward for t in trajs] == [t.reward for t in alone]
    assert len(log0) == len(log1)  # the same phases on both ranks
    for (n0, sent0), (n1, sent1) in zip(log0, log1, strict=True):
        assert sent0 == sent1 == max(n0, n1)  # equal lists of the largest count, not the sum
    rehearsal = list(zip(log0[1::2], log1[1::2], strict=True))  # calls alternate: caller phase, rehearsal phase
    assert any(0 < n1 < n0 for (n0, _), (n1, _) in rehearsal)  # rank 1 padded to rank 0's count
    assert any(n0 > 0 and n1 > 0 and sent < n0 + n1 for (n0, sent), (n1, _) in rehearsal)  # max, not sum
    assert any((n0 == 0) != (n1 == 0) for (n0, _), (n1, _) in zip(log0, log1, strict=True))  # one rank idles
    assert sum(n for n, _ in log0) == sum(len(t.rows) for t in trajs0)  # one row per real prompt, none dropped
    assert sum(n for n, _ in log1) == sum(len(t.rows) for t in trajs1)
    assert sum(r.role == "simulator" for t in trajs0 + trajs1 for r in t.rows) > 0


def test_without_equal_lists_each_rank_sends_its_own_count_or_one_dummy(toks, tasks):
    """Data parallel, one generator per rank (HF generate under ZeRO-3, vLLM colocate with TP 1): no padding to the
    other rank's count; a rank with no work sends one dummy while the other still generates."""
    (trajs0, log0), (trajs1, log1) = play_two_ranks(toks, tasks, equal_prompt_lists=False, tensor_parallel=False)
    for rank, trajs in enumerate((trajs0, trajs1)):
        assert rows_of(trajs) == rows_of(play_alone(toks[rank], tasks, split(tasks)[rank]))
    for (n0, sent0), (n1, sent1) in zip(log0, log1, strict=True):
        any_work = max(n0, n1) > 0
        assert (sent0, sent1) == ((max(n0, 1), max(n1, 1)) if any_work else (0, 0))
    assert any(sent0 != sent1 for (_, sent0), (_, sent1) in zip(log0, log1, strict=True))


def test_the_fake_catches_unequal_lists_under_tensor_parallel(toks, tasks):
    """Control: rank-dependent counts under the TP slicing hand rank 1 completions of rank 0's prompts."""
    out = play_two_ranks(toks, tasks, equal_prompt_lists=False, tensor_parallel=True)
    trajs1 = out[1][0]
    alone = play_alone(toks[1], tasks, split(tasks)[1])
    assert isinstance(trajs1, Exception) or rows_of(trajs1) != rows_of(alone)
