"""Rows -> optimizer steps: every row used once, ranks balanced by tokens, global token counts, per-micro-batch padding."""

import random

import pytest
import torch

from agentrl_shared.batch import balance_rows, plan_steps, rows_to_batch


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("n_rows", [1, 7, 33, 64])
def test_plan_uses_every_row_once_and_keeps_ranks_in_lock_step(world, n_rows):
    rng = random.Random(n_rows * 10 + world)
    num_tokens = [rng.randint(5, 300) for _ in range(n_rows)]
    loss_tokens = [rng.choice([0, rng.randint(1, 40)]) for _ in range(n_rows)]  # 0: a failed episode's row
    plan = plan_steps(num_tokens, loss_tokens, world, micro_rows=4, micro_per_step=2, rng=random.Random(0))
    used = [i for rank in range(world) for mb in plan.micro_batches(rank) for i in mb]
    assert sorted(used) == list(range(n_rows))  # no row dropped, none counted twice; padding is empty micro-batches
    sizes = [len(r) for r in plan.ranks]
    assert max(sizes) - min(sizes) <= 1
    assert plan.num_steps == -(-max(sizes) // 8)  # verl-agent: ceil(rows / mini-batch) optimizer steps
    assert all(len(plan.micro_batches(r)) == plan.num_steps * 2 for r in range(world))  # same forwards on every rank
    assert sum(plan.step_tokens) == sum(loss_tokens)
    for j in range(plan.num_steps):  # each step's normaliser is the loss tokens of exactly its rows on all ranks
        rows = [i for r in range(world) for k, mb in enumerate(plan.micro_batches(r)) if k // 2 == j for i in mb]
        assert plan.step_tokens[j] == sum(loss_tokens[i] for i in rows)


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("n_rows", [7, 33])
def test_prompts_order_a_step_s_micro_batches_by_length_and_keep_its_rows(world, n_rows):
    rng = random.Random(n_rows)
    prompts = [[rng.randint(0, 3)] * rng.choice([3, 40, 80]) for _ in range(n_rows)]  # first turns short, later long
    num_tokens, loss_tokens = [len(p) + 5 for p in prompts], [5] * n_rows
    plain = plan_steps(num_tokens, loss_tokens, world, micro_rows=2, micro_per_step=4, rng=random.Random(0))
    ordered = plan_steps(num_tokens, loss_tokens, world, micro_rows=2, micro_per_step=4, rng=random.Random(0),
                         prompts=prompts)  # fmt: skip
    assert (ordered.num_steps, ordered.step_tokens) == (plain.num_steps, plain.step_tokens)
    for rank in range(world):
        a, b = plain.micro_batches(rank), ordered.micro_batches(rank)
        assert len(a) == len(b)
        for j in range(plain.num_steps):  # the same rows in each step, each step's rows shortest first
            step = [i for mb in b[4 * j : 4 * j + 4] for i in mb]
            assert sorted(step) == sorted(i for mb in a[4 * j : 4 * j + 4] for i in mb)
            assert [len(prompts[i]) for i in step] == sorted(len(prompts[i]) for i in step)

    def padded(plan) -> int:  # prompt tokens the micro-batches run, each padded to its longest row
        return sum(
            len(mb) * max(len(prompts[i]) for i in mb) for r in range(world) for mb in plan.micro_batches(r) if mb
        )

    assert padded(ordered) <= padded(plain)


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("n_rows", [1, 7, 33])
@pytest.mark.parametrize("per_chunk", [1, 3, 8, 64])
def test_log_prob_chunks_hold_each_rank_s_rows_once_and_are_as_many_on_every_rank(world, n_rows, per_chunk):
    plan = plan_steps([10] * n_rows, [1] * n_rows, world, micro_rows=4, micro_per_step=2)
    chunks = [plan.chunks(rank, per_chunk) for rank in range(world)]
    assert len({len(c) for c in chunks}) == 1  # the same number of no-grad forwards on every rank (ZeRO-3)
    assert len(chunks[0]) == max(1, -(-max(len(r) for r in plan.ranks) // per_chunk))
    for rank in range(world):
        assert [i for c in chunks[rank] for i in c] == plan.ranks[rank]  # every row once, in training order
        assert all(len(c) <= per_chunk for c in chunks[rank])
    prompts = [[7] * (1 + i % 3) for i in range(n_rows)]  # three prompt lengths
    by_length = [plan.chunks(rank, per_chunk, prompts) for rank in range(world)]
    assert [[len(c) for c in r] for r in by_length] == [[len(c) for c in r] for r in chunks]  # same forwards, sizes
    for rank in range(world):
        order = [i for c in by_length[rank] for i in c]
        assert sorted(order) == sorted(plan.ranks[rank])  # every row once
        assert [len(prompts[i]) for i in order] == sorted(len(prompts[i]) for i in order)  # shortest first


def test_balance_rows_by_tokens():
    tokens = [100, 90, 80, 10, 10, 10, 5, 5]
    ranks = balance_rows(tokens, 2)
    loads = [sum(tokens[i] for i in r) for r in ranks]
    assert [len(r) for r in ranks] == [4, 4] and sorted(loads) == [130, 180]  # the best equal-count split
    assert ranks == balance_rows(tokens, 2)  # deterministic: every rank computes the same plan


def test_plan_without_rows_fails_on_every_rank_alike():
    with pytest.raises(ValueError, match="No rows"):
        plan_steps([], [], 2, 4, 1)


def test_micro_batch_padding_sides_masks_and_trim():
    batch, info = rows_to_batch([[1, 2, 3], [4]], [[7, 8], [9, 10, 11]], [True, True], [1.0, -1.0], pad_token_id=0)
    assert batch["prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[7, 8, 0], [9, 10, 11]]
    assert batch["completion_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch["advantages"].tolist() == [1.0, -1.0]
    assert info == {"rows": 2, "loss_tokens": 5}
    short, _ = rows_to_batch([[4]], [[9]], [True], [1.0], pad_token_id=0)
    assert short["prompt_ids"].shape == (1, 1) and short["completion_ids"].shape == (1, 1)  # own longest only


def test_rows_without_loss_and_empty_micro_batches():
    batch, info = rows_to_batch([[1], [2]], [[3, 4], [5]], [True, False], [2.0, 3.0], 0, teacher_prompts=[[9, 1], [2]])
    assert batch["completion_mask"].tolist() == [[1, 1], [0, 0]] and batch["advantages"].tolist() == [2.0, 0.0]
    assert batch["teacher_prompt_ids"].tolist() == [[9, 1], [0, 2]]
    assert info["loss_tokens"] == 2
    empty, info = rows_to_batch([], [], [], [], 0, teacher_prompts=[])
    assert empty["prompt_ids"].shape == (1, 1) and empty["completion_mask"].sum() == 0
    assert empty["teacher_prompt_ids"].shape == (1, 1) and info == {"rows": 0, "loss_tokens": 0}
    assert torch.equal(empty["advantages"], torch.zeros(1))
