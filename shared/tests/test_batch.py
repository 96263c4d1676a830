"""Rows -> TRL batch: padding sides, fixed row budget, zero-loss padding rows, failed rows, per-token advantages."""

import random

import pytest
import torch

from agentrl_shared.batch import rows_to_batch, select_rows
from agentrl_shared.rollout import Row


def row(p, c, failed=False):
    return Row(p, c, None, "", "", "", True, 0, 0, 0, failed=failed)


def test_padding_sides_and_masks():
    rows = [row([1, 2, 3], [7, 8]), row([4], [9, 10, 11])]
    batch = rows_to_batch(rows, torch.tensor([1.0, -1.0]), budget=2, pad_token_id=0, rng=random.Random(0))
    assert batch["prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[7, 8, 0], [9, 10, 11]]
    assert batch["completion_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch["advantages"].tolist() == [1.0, -1.0]


def test_zero_padding_rows_carry_no_loss():
    rows = [row([1], [2]), row([3], [4])]
    batch = rows_to_batch(rows, torch.tensor([1.0, 2.0]), budget=5, pad_token_id=0, rng=random.Random(0))
    assert batch["completion_mask"].sum(dim=1).tolist() == [1, 1, 0, 0, 0]
    assert batch["advantages"][2:].tolist() == [0.0, 0.0, 0.0]
    dup = rows_to_batch(
        rows, torch.tensor([1.0, 2.0]), budget=5, pad_token_id=0, rng=random.Random(0), padding="duplicate"
    )
    assert dup["completion_mask"].sum().item() == 5


def test_over_budget_subsamples_and_reports():
    rows = [row([i + 1], [i + 1]) for i in range(10)]
    batch = rows_to_batch(rows, torch.arange(10.0), budget=4, pad_token_id=0, rng=random.Random(1))
    assert batch["rows_dropped"] == 6 and batch["prompt_ids"].size(0) == 4
    idx = batch["row_index"].tolist()
    assert idx == sorted(idx) and batch["advantages"].tolist() == [float(i) for i in idx]


def test_failed_rows_are_masked_and_per_token_advantages_fit():
    rows = [row([1], [2, 3, 4]), row([1], [5], failed=True)]
    adv = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    batch = rows_to_batch(rows, adv, budget=2, pad_token_id=0, rng=random.Random(0))
    assert batch["completion_mask"][1].sum() == 0
    assert batch["advantages"].tolist() == [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]


def test_select_rows_errors():
    with pytest.raises(ValueError, match="valid: zero, duplicate"):
        select_rows(3, 4, "mirror", random.Random(0))
    with pytest.raises(ValueError, match="No rows"):
        select_rows(0, 4, "zero", random.Random(0))
