"""Lock-step generation of the trial runner, two ranks simulated by two threads in one process.

TRL's vLLM server mode and colocate with tensor parallel > 1 gather every rank's prompts, generate them together and
hand rank r the slice starting at `r * len(its prompts)` (trl 1.16 `generation/vllm_generation.py`): right only when
every rank sends as many prompts. The fake generator below does exactly that; the ranks hold different numbers of
trials whose episodes end at different turns (so solve turns and curate steps have rank-dependent counts). Under TP 2
every call, the curate steps included, must carry the maximum over ranks on both ranks and every row must get the
completion of its own prompt; without TP each rank sends its own count (one dummy while the other rank works), never
the sum.
"""

import threading

import pytest

from agentrl_shared.envs.base import Step
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.models import qwen_tokenizer
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import equal_prompt_count
from skillrise.trial import SolvePrompt, TrialRunner


class LengthEnv:
    """Ends each episode after `task["length"]` turns; never won."""

    def reset(self, task: dict, seed: int) -> Step:
        self.turn, self.length = 0, task["length"]
        return Step(f"Room {task['task_id']}.", 0.0, False, self._info())

    def step(self, action: str) -> Step:
        self.turn += 1
        return Step(f"Turn {self.turn} in {action[:8]}.", 0.0, self.turn >= self.length, self._info())

    def _info(self) -> dict:
        return {"won": False, "admissible_actions": ["go to door 1", "go to door 2"], "task_type": "scripted"}

    def close(self) -> None:
        pass


def answer(prompt_ids: list[int]) -> list[int]:
    """A completion that names its prompt (two token ids from a hash of the whole prompt)."""
    h = hash(tuple(prompt_ids))
    return [100 + h % 5000, 100 + (h // 5000) % 5000]


class TwoRanks:
    """An all-gather between two threads, and generation as TRL's vLLM TP / server path hands it back."""

    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=60)
        self.slots: list = [None, None]

    def all_gather(self, rank: int, value) -> list:
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def generate_tp(self, rank: int, prompt_ids: list[list[int]]):
        everyone = [p for part in self.all_gather(rank, prompt_ids) for p in part]
        start = rank * len(prompt_ids)  # TRL: process_index * len(prompts)
        return [answer(p) for p in everyone[start : start + len(prompt_ids)]], None


def test_the_fake_slices_by_rank_offset_as_trl_does():
    world, out = TwoRanks(), {}
    lists = {0: [[1], [2], [3]], 1: [[4]]}  # unequal lists: rank 1 gets rank 0's second completion

    def rank_main(rank):
        out[rank] = world.generate_tp(rank, lists[rank])[0]

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert out[0] == [answer(p) for p in lists[0]] and out[1] == [answer([2])]


def group(rank: int, g: int, lengths: list[int]) -> list[dict]:
    return [{"task_id": f"r{rank}g{g}t{p}", "task_type": "scripted", "instruction": "pick a door", "length": n}
            for p, n in enumerate(lengths)]  # fmt: skip


# rank 0: 2 trials of 1-turn tasks; rank 1: 1 trial (or none, an empty evaluation chunk) of 2-3 turn tasks
SETUPS = {"1_vs_2_trials": ([group(0, 0, [1, 1, 1]), group(0, 1, [1, 2, 1])], [group(1, 0, [3, 2, 3])]),
          "empty_chunk": ([group(0, 0, [1, 2, 1])], [])}  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


@pytest.mark.parametrize("tp", [2, 1])
@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_prompt_counts_and_completions_per_rank(tok, tp, setup):
    world = TwoRanks()
    calls: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    trials: dict[int, list] = {}

    def rank_main(rank: int):
        def prompt_count(n: int) -> int:  # the trainer's `_prompt_count`, with the threads' all-gather
            sent = equal_prompt_count(n, world.all_gather(rank, n), equal_lists=tp > 1)
            calls[rank].append((n, sent))
            return sent

        def generate_local(prompt_ids):  # HF generation: each rank gets the completions of its own prompts
            return [answer(p) for p in prompt_ids], None

        generate = (lambda ids: world.generate_tp(rank, ids)) if tp > 1 else generate_local
        groups = SETUPS[setup][rank]
        with EnvPool(LengthEnv, num_slots=2, num_workers=0) as pool:
            runner = TrialRunner(
                pool, SolvePrompt(make_prompt("textrooms")), tok, "textrooms", max_turns=3, max_prompt_length=4096
            )
            trials[rank] = runner.run(groups, list(range(len(groups))), [0] * len(groups), generate, K=3,
                                      prompt_count=prompt_count)  # fmt: skip

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert set(trials) == {0, 1}, "a rank raised (see the thread's traceback above)"

    # every row (solve turns and curate steps) got the completion of its own prompt: nothing misrouted or dropped
    rows = {r: [row for t in trials[r] for row, _ in t.rows()] for r in range(2)}
    for r in range(2):
        assert all(row.completion_ids == answer(row.prompt_ids) for row in rows[r])
        assert sum(row.role == "curate" for row in rows[r]) == 2 * len(trials[r])  # K - 1 curate steps per trial
    assert len(calls[0]) == len(calls[1])  # the same generation calls on both ranks
    for (own0, sent0), (own1, sent1) in zip(calls[0], calls[1], strict=True):
        if max(own0, own1) == 0:
            assert sent0 == sent1 == 0
        elif tp > 1:
            assert sent0 == sent1 == max(own0, own1)  # the maximum, not the sum
        else:
            assert (sent0, sent1) == (max(own0, 1), max(own1, 1))
    # rank-dependent counts did occur, in solve turns and in the curate steps (2 per trial on rank 0 vs 1 or 0)
    assert any(own0 != own1 and max(own0, own1) > 0 for (own0, _), (own1, _) in zip(calls[0], calls[1], strict=True))
