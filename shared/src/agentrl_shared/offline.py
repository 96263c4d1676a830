"""Environment variables that keep every run offline (Hugging Face Hub, transformers, datasets, litellm, W&B).

Call `set_offline_env()` before importing transformers or trl: the CLIs and the test conftest do.
"""

import os
from pathlib import Path


OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",  # no Hub access; also disables TRL telemetry
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRL_EXPERIMENTAL_SILENCE": "1",  # rollout_func / environment_factory experimental warnings
    "WANDB_MODE": "disabled",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "TOKENIZERS_PARALLELISM": "false",
}


def cache_dir() -> Path:
    """Where built models, tokenizers and JIT ops are cached: `$AGENTRL_CACHE`, default `~/.cache/agentrl`."""
    return Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))


def set_offline_env() -> None:
    """Set the offline variables (without overriding values the user set) and a DeepSpeed JIT cache."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))
