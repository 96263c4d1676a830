"""LoRA (`model.lora.r=8`): the frozen teacher is the initial model (the policy with its adapters disabled, no copy),
adapter checkpoints resume, the EMA teacher is refused, and ZeRO-3 on 2 processes trains only the adapters."""

import torch

from agentrl_shared.smoke import check_lora_two_ranks, error_line
from vad import cli


LORA = ["model.lora.r=8", "trainer.save_strategy=steps", "trainer.save_steps=1"]


def _logits(trainer, ids: torch.Tensor, teacher: bool) -> torch.Tensor:
    model, context = trainer._teacher(trainer.model) if teacher else (trainer.model, torch.enable_grad())
    with torch.no_grad(), context:
        return model(input_ids=ids).logits


def test_lora_teacher_is_the_initial_model_and_adapter_checkpoints_resume(tmp_path):
    cfg = cli.load("smoke", [f"trainer.output_dir={tmp_path}", *LORA, "trainer.max_steps=1"])
    first = cli.build_trainer(cfg)
    assert first.teacher_model is None  # no frozen copy: the base under the adapters is the initial model
    ids = torch.tensor([first.processing_class.tokenizer("Which colour is the square?")["input_ids"]])
    teacher0, student0 = _logits(first, ids, teacher=True), _logits(first, ids, teacher=False)
    assert torch.equal(teacher0, student0)  # LoRA starts at B = 0
    first.train()
    assert (tmp_path / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "checkpoint-1" / "model.safetensors").exists()  # adapters only
    assert torch.equal(_logits(first, ids, teacher=True), teacher0)  # the teacher did not move
    student1 = _logits(first, ids, teacher=False)
    assert (student1 - student0).abs().max() > 1e-4  # the student did

    resumed = cli.build_trainer(cli.load("smoke", [f"trainer.output_dir={tmp_path}", *LORA, "trainer.max_steps=2"]))
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 2
    assert torch.equal(_logits(resumed, ids, teacher=True), teacher0)
    assert not torch.equal(_logits(resumed, ids, teacher=False), student1)  # trained on from the checkpoint


def test_lora_with_the_ema_teacher_is_one_line():
    line = error_line(cli.main, ["train", "--config", "smoke", "model.lora.r=8", "trainer.teacher_ema=0.5",
                                 "trainer.target=direct"])  # fmt: skip
    assert "teacher_ema" in line and "model.lora.r=0" in line


def test_lora_under_zero3_on_two_ranks_trains_only_the_adapters(tmp_path):
    out = tmp_path / "run"
    check_lora_two_ranks("vad", out, ["--output", str(out), "data.eval_backend=openai",
                                      "data.eval_base_url=http://127.0.0.1:9/v1"])  # fmt: skip
