"""LoRA (`model.lora.r=8`): ZeRO-3 on 2 processes trains only the adapters, and the self-teacher is the adapted policy
while the KL reference is the base model (the policy with its adapters disabled)."""

import torch
from transformers import AutoTokenizer

from agentrl_shared.batch import plan_steps
from agentrl_shared.cli import env_tasks, set_model_init_kwargs
from agentrl_shared.lora import peft_config
from agentrl_shared.models import model_path
from agentrl_shared.smoke import check_lora_two_ranks
from agentrl_shared.trainer import TrainRow
from sdar.cli import load
from sdar.trainer import SDARTrainer


def test_lora_under_zero3_on_two_ranks_trains_only_the_adapters(tmp_path):
    out = tmp_path / "run"
    check_lora_two_ranks("sdar", out, [f"trainer.output_dir={out}"])


def test_self_teacher_is_the_adapted_policy_and_the_reference_the_base(tmp_path):
    # the plain teacher forward (the smoke config shares the prompt prefix): the base-vs-teacher check below is exact
    cfg = load("smoke", [f"trainer.output_dir={tmp_path}", "model.lora.r=8", "trainer.beta=0.01",
                         "trainer.shared_prefix_teacher=false"])  # fmt: skip
    args, env = cfg["trainer"], cfg["env"]
    set_model_init_kwargs(args, cfg["model"])
    path = model_path(cfg["model"].name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    trainer = SDARTrainer(path, args, env, env_tasks(env, env.train_split), processing_class=tok,
                          peft_config=peft_config(cfg["model"].lora))  # fmt: skip
    assert trainer.ref_model is None  # TRL builds no reference copy for a PEFT policy

    def ids(text: str) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([tok(text)["input_ids"]])
        return x, torch.ones_like(x)

    prompt, teacher_prompt, completion = ids("Room 1."), ids("Skills: open doors.\nRoom 1."), ids("go to door 2")

    row = TrainRow(prompt[0][0].tolist(), completion[0][0].tolist(), True, 1.0,
                   teacher_prompt_ids=teacher_prompt[0][0].tolist(), meta={"group_id": 0, "won": True})  # fmt: skip
    plan = plan_steps([len(row.prompt_ids) + len(row.completion_ids)], [len(row.completion_ids)], 1, 1, 1)
    batch = {"completion_ids": completion[0], "completion_mask": completion[1]}

    def forwards() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The KL reference on the student prompt, the self-teacher hook on the teacher prompt, and the base model
        on the teacher prompt."""
        with torch.no_grad():
            trainer._extra_forwards([batch], plan.micro_batches(0), [row], plan, None)
            return (trainer._ref_logps(*prompt, *completion), batch["teacher_per_token_logps"],
                    trainer._ref_logps(*teacher_prompt, *completion))  # fmt: skip

    ref0, teacher0, base_on_teacher0 = forwards()
    assert torch.equal(teacher0, base_on_teacher0)  # LoRA starts at B = 0: the adapted policy is the base
    trainer.train()
    trainer.pool.close()
    ref1, teacher1, base_on_teacher1 = forwards()
    assert torch.equal(ref0, ref1) and torch.equal(base_on_teacher0, base_on_teacher1)  # the base never moves
    assert (teacher1 - teacher0).abs().max() > 1e-4  # the teacher is the current (trained) adapted policy
