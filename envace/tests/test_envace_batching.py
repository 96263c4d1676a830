"""One rollout -> one optimizer step: every row of the rollout is trained exactly once, in `gradient_accumulation_steps`
micro-batches whose loss normaliser is the step's real-token count; with `model_sharing=false` the caller rows go
to the policy and the rehearsal rows train the separate model (official `run_checklist_noshare.sh`).

Generation is scripted (`scripted.ScriptedPolicy`) so that rewards vary and both roles produce rows."""

import json

import pytest
import torch
from datasets import Dataset
from scripted import ScriptedPolicy
from transformers import AutoTokenizer

import envace.trainer
from agentrl_shared.models import model_path
from envace.cli import _tasks, load
from envace.data import generate_tasks
from envace.trainer import EnvACETrainer


def build(tmp_path, monkeypatch, *overrides):
    cfg = load("smoke", [f"trainer.output_dir={tmp_path}", *overrides])
    args, env = cfg["trainer"], cfg["env"]
    path = model_path(cfg["model"].name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    tasks = generate_tasks(8, seed=0)
    policies = {}

    def scripted(role):
        def make(trainer):
            policies.setdefault(role, ScriptedPolicy(tok, tasks, garbage=0.3, seed=len(policies)))
            return policies[role]

        return make

    monkeypatch.setattr(envace.trainer, "trainer_generate_fn", scripted("policy"))
    monkeypatch.setattr(envace.trainer, "simulator_generate_fn", scripted("simulator"))
    dataset = Dataset.from_list(
        [{"prompt": t["user_turns"][0], "task_json": json.dumps(t)} for t in _tasks(cfg, "train")]
    )
    trainer = EnvACETrainer(path, args, env, dataset, processing_class=tok)
    trainer.model.train()  # as inside `train()`: loss metrics go to the train log
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by the HF training loop
    collected = []
    collect = trainer.collector.collect

    def spy(*a, **k):
        collected.append(collect(*a, **k))
        return collected[-1]

    trainer.collector.collect = spy
    batch = [{"prompt": t["user_turns"][0], "task_json": json.dumps(t)} for t in tasks[:2] for _ in range(2)]
    return trainer, batch, collected, policies


def real_rows(micro_batches) -> list[tuple]:
    """(prompt ids, completion ids) of every row that carries loss."""
    out = []
    for b in micro_batches:
        for i in range(b["prompt_ids"].size(0)):
            if b["completion_mask"][i].any():
                p = b["prompt_ids"][i][b["prompt_mask"][i].bool()].tolist()
                c = b["completion_ids"][i][: int(b["completion_mask"][i].sum())].tolist()
                out.append((tuple(p), tuple(c)))
    return out


def test_rollout_trains_every_row_once_in_one_step(tmp_path, monkeypatch):
    trainer, batch, collected, _ = build(tmp_path, monkeypatch)
    micro_batches = trainer._rollout_micro_batches(batch)
    rows = [r for t in collected[0] for r in t.rows]
    assert {r.role for r in rows} == {"caller", "simulator"}
    assert len(micro_batches) == trainer.args.gradient_accumulation_steps  # one optimizer step
    expected = sorted((tuple(r.prompt_ids), tuple(r.completion_ids)) for r in rows if not r.failed)
    assert sorted(real_rows(micro_batches)) == expected  # every row once, no duplicates, none dropped
    tokens = sum(len(r.completion_ids) for r in rows if not r.failed)
    for b in micro_batches:  # dapo normaliser = the step's real tokens (1 rank; steps_per_generation = GA here)
        assert b["num_items_in_batch"].item() == tokens
    assert torch.cat([b["advantages"] for b in micro_batches]).abs().sum() > 0  # rewards varied within groups


def test_no_share_trains_the_rehearsal_model_on_rehearsal_rows_only(tmp_path, monkeypatch):
    trainer, batch, collected, policies = build(tmp_path, monkeypatch, "trainer.model_sharing=false")
    assert trainer.simulator is not None and trainer.simulator is not trainer.model
    policy_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    sim_before = {k: v.clone() for k, v in trainer.simulator.state_dict().items()}
    micro_batches = trainer._rollout_micro_batches(batch)
    rows = [r for t in collected[0] for r in t.rows]
    assert policies["simulator"].calls["simulator"] > 0 and policies["simulator"].calls["caller"] == 0
    assert policies["policy"].calls["simulator"] == 0
    # the policy's step gets exactly the caller rows
    callers = sorted((tuple(r.prompt_ids), tuple(r.completion_ids)) for r in rows if r.role == "caller")
    assert sorted(real_rows(micro_batches)) == callers
    # the rehearsal model took its own optimizer step during the rollout; the policy has not moved yet
    sim_after = trainer.simulator.state_dict()
    assert [k for k in sim_before if torch.equal(sim_before[k], sim_after[k])] == []
    assert all(torch.equal(policy_before[k], v) for k, v in trainer.model.state_dict().items())
    logged = trainer._metrics["train"]
    assert logged["simulator/rows"] == [float(sum(r.role == "simulator" for r in rows))]
    assert "simulator/entropy" in logged and "entropy" not in logged  # its loss metrics are kept apart


def test_no_share_rehearsal_model_sees_only_rehearsal_rows(tmp_path, monkeypatch):
    """Zero advantages on every caller row must leave the rehearsal model's update unchanged: its step is computed
    from the rehearsal rows alone."""
    trainer, batch, collected, _ = build(tmp_path, monkeypatch, "trainer.model_sharing=false")
    seen = []
    plan = trainer._plan

    def spy(rows, advantages, seed):
        seen.append({r.role for r in rows})
        return plan(rows, advantages, seed)

    trainer._plan = spy
    trainer._rollout_micro_batches(batch)
    assert seen == [{"simulator"}, {"caller"}]


def test_no_share_refuses_deepspeed(tmp_path, monkeypatch):
    trainer, *_ = build(tmp_path, monkeypatch)
    trainer.is_deepspeed_enabled = True
    with pytest.raises(ValueError, match="model_sharing=false"):
        trainer._init_simulator(model_path("tiny-qwen3"))
