"""Environment variables that keep every run offline (Hugging Face Hub, transformers, datasets, litellm, W&B).

Call `set_offline_env()` before importing transformers or trl: the CLIs and the test conftest do.
"""

import os
import time
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
    """Set the offline variables (without overriding values the user set) and a DeepSpeed JIT cache, and refuse a
    stale JIT build lock in that cache (`check_jit_locks`)."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))
    check_jit_locks()


JIT_LOCK_MAX_AGE_S = 1800  # a DeepSpeed CPU op (shm_comm) builds in about a minute; half an hour is a dead build


class StaleJitLockError(RuntimeError):
    """A JIT build lock left by a killed build: every later DeepSpeed process would wait on it forever."""


def check_jit_locks(max_age_s: float = JIT_LOCK_MAX_AGE_S) -> None:
    """Refuse to start when `$TORCH_EXTENSIONS_DIR/<op>/lock` is older than `max_age_s`.

    torch's `FileBaton` (torch/utils/file_baton.py) creates `lock` before a JIT build and deletes it after; a process
    killed mid-build leaves it, and every later process that loads the op (DeepSpeed ZeRO on CPU loads `shm_comm`)
    polls it forever without a word. Failing fast names the file and the fix instead.
    """
    root = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    now = time.time()
    stale = [lock for lock in root.glob("*/lock") if now - lock.stat().st_mtime > max_age_s]
    if stale:
        ages = ", ".join(f"{lock} ({(now - lock.stat().st_mtime) / 60:.0f} min old)" for lock in stale)
        raise StaleJitLockError(
            f"stale JIT build lock: {ages}. A killed build left it and DeepSpeed would wait on it forever; "
            f"if no build is running (`pgrep -af ninja`), delete it: rm {' '.join(str(lock) for lock in stale)}"
        )
