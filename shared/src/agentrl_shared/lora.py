"""LoRA through TRL's `peft_config` path: the `model.lora` section as a `peft.LoraConfig`, adapter checkpoints.

Every trainer passes `peft_config(cfg["model"].lora)` to its `GRPOTrainer` subclass, which wraps the policy with
`peft.get_peft_model` (huggingface/trl@v1.16.0 `trl/trainer/grpo_trainer.py`, `GRPOTrainer.__init__`, adapters kept
in the base dtype under ZeRO-3). What the adapters mean for each model a method reads:
- the KL reference is the base model, i.e. the policy with its adapters disabled (`adapters_disabled`), and no second
  copy is loaded (TRL: `ref_model = None` for a PEFT model; verl: `ref_in_actor = lora_rank > 0`,
  ZJU-REAL/SDAR@8b85c23 `verl/trainer/ppo/ray_trainer.py`);
- a self-teacher (SDAR, AgentOPSD) is the current adapted policy (adapters on), only its prompt differs;
- VAD's frozen teacher (the initial model) is the policy with its adapters disabled.
A checkpoint holds the adapters only (`adapter_model.safetensors`, `adapter_config.json`); `load_model` rebuilds the
policy from one and merges the adapters for generation, `python -m agentrl_shared.lora CHECKPOINT OUT` writes the
merged model (for vLLM or serving).
"""

import argparse
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class LoraSettings:
    """`model.lora`: train LoRA adapters instead of every weight (`peft_config`, TRL's `peft_config` path).
    Defaults are verl's, the framework the official SDAR, AgentOPSD and EnvACE code runs on (ZJU-REAL/SDAR@8b85c23
    `verl/trainer/config/ppo_trainer.yaml`: `lora_rank: 0`, `lora_alpha: 16`, `target_modules: all-linear`;
    `verl/workers/fsdp_workers.py` passes no dropout, so PEFT's `lora_dropout=0.0`).

    Args:
        r (`int`): adapter rank; 0 (default) trains the full model.
        alpha (`float`): LoRA scaling numerator (the update B A is scaled by alpha / r).
        dropout (`float`): dropout on the adapter input, in [0, 1).
        target_modules (`str` or `list[str]`): `all-linear` (PEFT's shorthand: every linear layer but the output
            head) or module names, e.g. [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj].
    """

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"

    def __post_init__(self):
        if self.r < 0:
            raise ValueError(f"model.lora.r={self.r} must be at least 0 (0 trains the full model).")
        if self.alpha <= 0:
            raise ValueError(f"model.lora.alpha={self.alpha} must be positive.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.lora.dropout={self.dropout} must be in [0, 1).")
        if not self.target_modules:
            raise ValueError("model.lora.target_modules is empty: name modules, or all-linear.")


ADAPTER_CONFIG = "adapter_config.json"  # what PEFT's `save_pretrained` writes next to the adapter weights


def peft_config(lora: LoraSettings):
    """`model.lora` as the `peft.LoraConfig` TRL's `GRPOTrainer(peft_config=...)` takes; None when `r` is 0.

    verl's mapping (ZJU-REAL/SDAR@8b85c23 `verl/workers/fsdp_workers.py`, `_build_model_optimizer`): causal LM,
    `r`, `lora_alpha`, `target_modules`, `bias="none"`; `lora_dropout` from the section (verl leaves PEFT's 0.0)."""
    if lora.r == 0:
        return None
    from peft import LoraConfig, TaskType

    targets = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    return LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=targets, bias="none")  # fmt: skip


def adapters_disabled(model):
    """Inside: `model` (a trainer's wrapped model, DeepSpeed engine or not) runs as its base model when it is a PEFT
    model (TRL's reference forward, `trl.trainer.utils.use_adapter(model, None)`); otherwise nothing changes."""
    from accelerate.utils import extract_model_from_parallel, is_peft_model

    inner = extract_model_from_parallel(model)
    return inner.disable_adapter() if is_peft_model(inner) else contextlib.nullcontext()


def is_adapter_checkpoint(path: str | Path) -> bool:
    """Whether `path` is a folder holding PEFT adapters (a LoRA run's `final` or `checkpoint-N`)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def base_model_path(path: str | Path) -> str:
    """The base model an adapter checkpoint was trained on (`base_model_name_or_path` of its adapter config)."""
    return json.loads((Path(path) / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]


def load_model(path: str | Path, model_cls, **kwargs):
    """`model_cls.from_pretrained(path, **kwargs)`; an adapter checkpoint is loaded on its base model and merged
    (`merge_and_unload`: one plain model, the weights vLLM or `generate` see)."""
    if not is_adapter_checkpoint(path):
        return model_cls.from_pretrained(path, **kwargs)
    from peft import PeftModel

    base = model_cls.from_pretrained(base_model_path(path), **kwargs)
    return PeftModel.from_pretrained(base, str(path)).merge_and_unload()


def merge_checkpoint(path: str | Path, out: str | Path) -> Path:
    """Write the merged model of adapter checkpoint `path` (weights, config, and the tokenizer or processor the
    checkpoint holds) to `out`, loadable by vLLM or `from_pretrained` without PEFT."""
    from transformers import (
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING,
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoProcessor,
    )

    vlm = type(AutoConfig.from_pretrained(base_model_path(path))) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING  # VAD's
    model = load_model(path, AutoModelForImageTextToText if vlm else AutoModelForCausalLM, dtype="auto")
    out = Path(out)
    model.save_pretrained(out)
    AutoProcessor.from_pretrained(path).save_pretrained(out)  # a tokenizer where the model has no processor
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentrl_shared.lora",
                                     description="merge a LoRA checkpoint into its base model (for vLLM or serving)")  # fmt: skip
    parser.add_argument("checkpoint", type=Path, help="a LoRA run's final/ or checkpoint-N/ folder")
    parser.add_argument("out", type=Path, help="folder for the merged model")
    ns = parser.parse_args(argv)
    if not is_adapter_checkpoint(ns.checkpoint):
        parser.error(f"{ns.checkpoint} holds no {ADAPTER_CONFIG}: it is not a LoRA checkpoint")
    print(merge_checkpoint(ns.checkpoint, ns.out))


if __name__ == "__main__":
    main()


__all__ = ["LoraSettings", "adapters_disabled", "base_model_path", "is_adapter_checkpoint", "load_model", "merge_checkpoint",
           "peft_config"]  # fmt: skip
