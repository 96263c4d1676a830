"""One rollout -> one optimizer step: every row of the rollout is trained exactly once, in
`gradient_accumulation_steps` micro-batches whose loss normaliser is the step's real-token count, and TRL's loss is
divided by exactly that count; with `model_sharing=false` the caller rows go to the policy and the rehearsal rows
train the separate model (official `run_checklist_noshare.sh`), whose weights and optimizer state go through every
checkpoint and back on resume.

Generation is scripted (`scripted.ScriptedPolicy`) so that rewards vary and both roles produce rows."""

import pytest
import torch
from scripted import ScriptedPolicy
from transformers import AutoTokenizer

import agentrl_shared.trainer
import envace.trainer
from agentrl_shared.cadence import GroupedTaskSampler
from agentrl_shared.models import model_path
from envace.cli import _tasks, load
from envace.trainer import SIMULATOR_DIR, SIMULATOR_OPTIMIZER, EnvACETrainer, RolloutBlockSampler


def build(tmp_path, monkeypatch, *overrides, policies=None):
    cfg = load("smoke", [f"trainer.output_dir={tmp_path}", *overrides])
    args, env = cfg["trainer"], cfg["env"]
    path = model_path(cfg["model"].name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    tasks = _tasks(cfg, "train")
    policies = {} if policies is None else policies

    def scripted(role):
        def make(trainer):
            policies.setdefault(role, ScriptedPolicy(tok, tasks, garbage=0.3, seed=len(policies)))
            return policies[role]

        return make

    monkeypatch.setattr(agentrl_shared.trainer, "trainer_generate_fn", scripted("policy"))
    monkeypatch.setattr(envace.trainer, "simulator_generate_fn", scripted("simulator"))
    trainer = EnvACETrainer(path, args, env, tasks, processing_class=tok)
    trainer.model.train()  # as inside `train()`: loss metrics go to the train log
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by the HF training loop
    trainer.create_optimizer_and_scheduler(args.max_steps)  # so is the rollout-counted schedule a rollout reads
    collected = []
    collect = trainer.collector.collect

    def spy(*a, **k):
        collected.append(collect(*a, **k))
        return collected[-1]

    trainer.collector.collect = spy
    batch = [{"task_index": i} for i in (0, 1) for _ in range(2)]  # 2 groups of G = 2, as the sampler yields them
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
    assert trainer.args.max_steps == trainer.args.num_rollouts  # one optimizer step per rollout
    micro_batches = trainer._rollout_micro_batches(batch)
    rows = [r for t in collected[0] for r in t.rows]
    assert {r.role for r in rows} == {"caller", "simulator"}
    assert len(micro_batches) == trainer.args.gradient_accumulation_steps  # one optimizer step
    expected = sorted((tuple(r.prompt_ids), tuple(r.completion_ids)) for r in rows)
    assert sorted(real_rows(micro_batches)) == expected  # every row once, no duplicates, none dropped
    tokens = sum(len(r.completion_ids) for r in rows)
    for b in micro_batches:  # the step's real tokens and rows (1 rank)
        assert b["token_normalizer"].item() == tokens and b["row_normalizer"].item() == len(rows)
    assert torch.cat([b["advantages"] for b in micro_batches]).abs().sum() > 0  # rewards varied within groups
    logged = trainer._metrics["train"]
    assert logged["rollout/rows"] == [float(len(rows))] and logged["env/num_episodes"] == [4.0]
    assert logged["rollout/generated_tokens"] == [float(tokens)]
    assert logged["rollout/micro_batch_rows"] == [float(max(b["prompt_ids"].size(0) for b in micro_batches))]


@pytest.mark.parametrize("steps_per_generation, accumulation, step_tokens", [(2, 2, 37), (1, 4, 37), (1, 4, 2)])
def test_loss_is_the_steps_token_sum_over_its_token_count(tmp_path, monkeypatch, steps_per_generation, accumulation,
                                                          step_tokens):  # fmt: skip
    """At theta_old = theta the PPO-clip per-token loss is -A, so the micro-batch loss must be
    -sum_rows A_row * tokens_row / step_tokens whatever TRL's generation-batch bookkeeping (steps_per_generation,
    gradient accumulation) and its clamp of `num_items_in_batch` at 1 (last case: 2 tokens * 1 / 4 < 1)."""
    trainer, *_ = build(tmp_path, monkeypatch, "trainer.loss_type=dapo")
    trainer.args.steps_per_generation, trainer.current_gradient_accumulation_steps = steps_per_generation, accumulation
    batch = {
        "prompt_ids": torch.tensor([[5, 6, 7], [0, 8, 9]]),
        "prompt_mask": torch.tensor([[1, 1, 1], [0, 1, 1]]),
        "completion_ids": torch.tensor([[11, 12, 13, 14], [15, 16, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
        "advantages": torch.tensor([0.5, -2.0]),
        "token_normalizer": torch.tensor(float(step_tokens)),  # 1 rank: the step's real tokens
    }
    loss = trainer._compute_loss(trainer.model, batch)
    assert loss.item() == pytest.approx(-(0.5 * 4 - 2.0 * 2) / step_tokens, rel=1e-6)


def naive_step_loss(trainer, rows: list[tuple], loss_type: str) -> torch.Tensor:
    """The step's loss computed row by row, each row alone (no padding), from the trainer's per-token log-probs:
    each row's PPO-clip terms -min(c1_t A, c2_t A) (c1 = min(r_t, delta), c2 = clip(r_t, 1 - eps, 1 + eps_high),
    r_t = exp(l_t - sg(l_t))); `grpo`: a row's token mean, then the mean over the rows (verl token-mean over one-row
    micro-batches); `dapo`: the sum over all tokens / their count."""
    args, terms = trainer.args, []
    for prompt, completion, adv in rows:
        p, c = torch.tensor([prompt]), torch.tensor([completion])
        logp = trainer._logps(trainer.model, p, torch.ones_like(p), c, torch.ones_like(c))[0]  # (T,)
        ratio = torch.exp(logp - logp.detach())
        c1 = torch.clamp(ratio, max=args.delta)
        c2 = torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon_high)
        terms.append(-torch.minimum(c1 * adv, c2 * adv))  # (T,)
    if loss_type == "grpo":
        return sum(t.mean() for t in terms) / len(terms)
    return sum(t.sum() for t in terms) / sum(len(t) for t in terms)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("rows_per_forward", [1, 2])
def test_rows_of_5_and_500_tokens_weigh_as_the_official_loss(tmp_path, monkeypatch, loss_type, rows_per_forward):
    """A step of two rows whose completions have 5 and 500 tokens, in one forward or in two (gradient accumulation).
    At theta_old = theta the PPO-clip term is -A per token, so the step's loss with A = one-hot(row) is minus that
    row's weight: `grpo` (official) gives both rows 1/2, `dapo` 5/505 and 500/505, to 1e-6. The gradient with
    A = (1, -0.5) matches the naive row-by-row loss to 1e-6 with one row per forward (float32 padding noise, 2e-5
    relative, with both rows in one forward)."""
    from agentrl_shared.batch import rows_to_batch

    trainer, *_ = build(tmp_path, monkeypatch, f"trainer.loss_type={loss_type}")
    g = torch.Generator().manual_seed(0)
    prompt = [9707, 11, 1879]
    completions = [torch.randint(0, 5000, (n,), generator=g).tolist() for n in (5, 500)]

    def step_loss(advantages):
        groups = [[0, 1]] if rows_per_forward == 2 else [[0], [1]]
        trainer.current_gradient_accumulation_steps = len(groups)
        total = 0.0
        for index in groups:
            batch, _ = rows_to_batch([prompt] * len(index), [completions[i] for i in index], [True] * len(index),
                                     [advantages[i] for i in index], trainer.processing_class.pad_token_id)  # fmt: skip
            batch |= {"token_normalizer": torch.tensor(505.0), "row_normalizer": torch.tensor(2.0)}  # 1 rank
            total = total + trainer._compute_loss(trainer.model, batch)
        return total

    with torch.no_grad():
        weights = [-step_loss([1.0, 0.0]).item(), -step_loss([0.0, 1.0]).item()]
    expected = [0.5, 0.5] if loss_type == "grpo" else [5 / 505, 500 / 505]
    assert weights == pytest.approx(expected, abs=1e-6)

    params = [p for p in trainer.model.parameters() if p.requires_grad]
    ours = torch.autograd.grad(step_loss([1.0, -0.5]), params, allow_unused=True)
    naive = naive_step_loss(trainer, [(prompt, c, a) for c, a in zip(completions, [1.0, -0.5], strict=True)],
                            loss_type)  # fmt: skip
    reference = torch.autograd.grad(naive, params, allow_unused=True)
    worst = max((a - b).abs().max().item() for a, b in zip(ours, reference, strict=True) if a is not None)
    scale = max(a.abs().max().item() for a in reference if a is not None)
    # one row per forward (verl's ppo_micro_batch_size_per_gpu=1): the same arithmetic as the naive loop; two rows
    # in one forward: the 5-token row is padded to 500, which changes float32 summation orders (~1e-5 relative)
    assert scale > 1e-4 and worst < (1e-6 if rows_per_forward == 1 else 2e-5 * scale)


def test_no_share_trains_the_rehearsal_model_on_rehearsal_rows_only(tmp_path, monkeypatch):
    trainer, batch, collected, policies = build(tmp_path, monkeypatch, "trainer.model_sharing=false")
    assert trainer.simulator is not None and trainer.simulator is not trainer.model
    policy_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    sim_before = {k: v.clone() for k, v in trainer.simulator.state_dict().items()}
    seen = []
    train_simulator = trainer._train_simulator

    def spy(rows, advantages):
        seen.append({r.role for r in rows})
        return train_simulator(rows, advantages)

    trainer._train_simulator = spy
    micro_batches = trainer._rollout_micro_batches(batch)
    rows = [r for t in collected[0] for r in t.rows]
    assert seen == [{"simulator"}]  # its step is computed from the rehearsal rows alone
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


def test_no_share_rehearsal_model_and_its_optimizer_round_trip_through_a_checkpoint(tmp_path, monkeypatch):
    """A one-rollout no-share run saves `checkpoint-1` (the last rollout is always saved); resuming from it restores
    the trained rehearsal model and its AdamW moments, not the initial weights and an empty optimizer."""
    overrides = ["trainer.model_sharing=false", "trainer.num_rollouts=1", "trainer.save_strategy=steps",
                 "trainer.save_steps=5"]  # fmt: skip
    trainer, *_ = build(tmp_path, monkeypatch, *overrides)
    trainer.train()
    checkpoint = tmp_path / "checkpoint-1"
    assert (checkpoint / SIMULATOR_DIR / "config.json").exists()
    assert (checkpoint / SIMULATOR_DIR / SIMULATOR_OPTIMIZER).exists()
    trained = {k: v.clone() for k, v in trainer.simulator.state_dict().items()}
    moments = trainer.simulator_optimizer.state_dict()["state"]
    assert moments and all(s["step"] == 1 for s in moments.values())

    resumed, *_ = build(tmp_path, monkeypatch, *overrides, f"trainer.resume_from_checkpoint={checkpoint}")
    initial = {k: v.clone() for k, v in resumed.simulator.state_dict().items()}
    assert any(not torch.equal(initial[k], trained[k]) for k in trained)  # a fresh copy starts elsewhere
    resumed.train(resume_from_checkpoint=str(checkpoint))  # nothing left to train: it only loads
    assert resumed.rollouts_done == 1
    assert all(torch.equal(v, trained[k]) for k, v in resumed.simulator.state_dict().items())
    state = resumed.simulator_optimizer.state_dict()["state"]
    assert state.keys() == moments.keys()
    for i, s in moments.items():
        assert all(torch.equal(s[key], state[i][key]) for key in ("step", "exp_avg", "exp_avg_sq"))


def test_one_epoch_of_rollouts_plays_every_task_once():
    """8 tasks, G = 2, 4 episodes per rollout over all ranks, 3 data batches per optimizer step (GA): the blocks the
    rollouts play (every GA-th) cover each task exactly G times in 4 rollouts, the next 4 rollouts again."""
    sampler = RolloutBlockSampler(GroupedTaskSampler(8, 2, seed=0, num_samples=8 * 4), block=4, repeat=3)
    stream = list(sampler)
    assert len(stream) == len(sampler) == 8 * 4 * 3
    blocks = [stream[k : k + 4] for k in range(0, len(stream), 4)]
    assert all(blocks[k] == blocks[k - k % 3] for k in range(len(blocks)))  # a rollout's GA batches are one block
    played = blocks[::3]  # what the rollouts play
    for epoch in (played[:4], played[4:]):
        assert sorted(i for block in epoch for i in block) == sorted(list(range(8)) * 2)


def test_no_share_refuses_deepspeed(tmp_path, monkeypatch):
    trainer, *_ = build(tmp_path, monkeypatch)
    trainer.is_deepspeed_enabled = True
    with pytest.raises(ValueError, match="model_sharing=false"):
        trainer._init_simulator(model_path("tiny-qwen3"))


def test_eval_top_p_override_restores_the_training_setting():
    from types import SimpleNamespace

    from transformers import GenerationConfig

    from envace.trainer import top_p_override

    trainer = SimpleNamespace(use_vllm=False, generation_config=GenerationConfig(do_sample=True, top_p=1.0))
    with top_p_override(trainer, 0.95):
        assert trainer.generation_config.top_p == 0.95
    assert trainer.generation_config.top_p == 1.0
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=SimpleNamespace(top_p=1.0))
    with top_p_override(trainer, 0.95):
        assert trainer.vllm_generation.top_p == 0.95
    assert trainer.vllm_generation.top_p == 1.0


def test_frozen_caller_takes_no_update(tmp_path, monkeypatch):
    """CALLER_MODE=frozen (no-share): the policy's learning rate is 0 in every rollout, the rehearsal model's not."""
    trainer, *_ = build(tmp_path, monkeypatch, "trainer.model_sharing=false", "trainer.caller_mode=frozen")
    trainer._set_rollout_lr(0)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [0.0] * len(trainer.optimizer.param_groups)
    assert all(g["lr"] == trainer.args.learning_rate for g in trainer.simulator_optimizer.param_groups)
