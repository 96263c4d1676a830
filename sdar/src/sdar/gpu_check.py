"""`python -m sdar.gpu_check` (`make gpu-check`): a short check of the GPU training path on one lent GPU.

SDAR and plain GRPO train 2 rollouts each on SmolLM2-135M-Instruct (a real Llama architecture, built offline) on
TextRooms under DeepSpeed ZeRO-3 in bf16, generating with HF `generate` (the ZeRO-3 gather included), or with TRL's
vLLM colocate engine with `--vllm`. It needs no network: on a bare node (torch with CUDA, transformers, accelerate)
`make gpu-check` installs what is missing from wheels carried with the tree (`make gpu-carry`, built beforehand on a
machine with network).

Printed per method: seconds per rollout by stage (every stage timer waits for the GPU: `torch.cuda.synchronize()`),
generated tokens per second (generation time alone, the weight sync left out), training MFU against the GPU's dense
bf16 peak and peak GPU memory. MFU counts the FLOPs of the model's real matmuls, 6 x parameters x tokens for the
forward and backward: every linear layer but the LM head over prompt and completion tokens, the LM head over
completion tokens only (TRL computes logits for the completion alone); attention-score FLOPs are left out, so it is
a lower bound. Figures are written to `<output>/gpu_check.json`. Without CUDA it stops at once with the reason.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time
from importlib.resources import files
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

# dense bf16 peak FLOP/s by device name (vendor data sheets, without sparsity)
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12}
OVERRIDES = [
    "model.name_or_path=smollm2-135m",
    "model.dtype=bfloat16",
    "trainer.use_cpu=false",
    "trainer.bf16=true",
    "trainer.num_rollouts=2",
    "trainer.per_device_train_batch_size=8",
    "trainer.steps_per_generation=8",  # 64 episodes = 8 groups of 8
    "trainer.num_generations=8",
    "trainer.micro_batch_rows=16",
    "trainer.gradient_accumulation_steps=4",
    "trainer.max_completion_length=64",
    "trainer.learning_rate=1e-6",
    "env.max_turns=4",
    "env.eval_every=0",
    "env.eval_episodes=16",
]
VLLM_OVERRIDES = ["trainer.use_vllm=true", "trainer.vllm_mode=colocate", "trainer.vllm_gpu_memory_utilization=0.3"]
NEEDS = ("trl==1.16.0, deepspeed==0.19.8, datasets==5.2.0 and their dependencies (`make gpu-carry` on a machine "
         "with network builds them into .gpu-carry/, which travels with the tree)")  # fmt: skip


def require_gpu(use_vllm: bool) -> None:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(f"sdar.gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here); on a GPU node "
                         f"it needs {NEEDS}.")  # fmt: skip
    if use_vllm:
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise SystemExit("sdar.gpu_check --vllm needs vLLM: `uv sync --locked --inexact --extra vllm`.") from None


class SynchronizedClock:
    """The trainer's stage timers (`time.perf_counter`), each reading taken once the GPU's queued work is done: CUDA
    runs asynchronously, so an unsynchronized timer charges a stage's kernels to whichever stage waits next."""

    def __init__(self):
        import torch

        self._synchronize = torch.cuda.synchronize

    def perf_counter(self) -> float:
        self._synchronize()
        return time.perf_counter()


def single_process_deepspeed_env() -> None:
    """ZeRO-3 on one GPU without a launcher (the variables `accelerate launch` would set)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "ACCELERATE_USE_DEEPSPEED": "true"}  # fmt: skip
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def matmul_parameters(config) -> tuple[int, int]:
    """`(parameters of every linear layer but the LM head, parameters of the LM head)` of the model `config`
    describes, counted on the model built on the meta device (no memory; embeddings and norms are no matmuls)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    body = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    return body, head.weight.numel()


def summarize_run(log_history: list[dict], peak_flops: float | None, body_params: int, head_params: int) -> dict:
    """Per-rollout stage seconds, generated tokens/s and training MFU from a run's `log_history` (the rollout metrics
    are logged on each rollout's first optimizer step, `time/forward_backward_s` on every step)."""
    logs = [h for h in log_history if "rollout/rows" in h]
    steps = [h for h in log_history if "time/forward_backward_s" in h]
    stages = {k.removeprefix("time/"): statistics.fmean(h.get(k, 0.0) for h in logs)
              for k in sorted({k for h in logs for k in h if k.startswith("time/")})}  # fmt: skip
    stages["forward_backward_s"] = sum(h["time/forward_backward_s"] for h in steps) / max(len(logs), 1)
    completion_tokens = [h["rollout/rows"] * h["completions/mean_length"] for h in logs]
    generation_s = sum(h.get("time/generation_s", 0.0) for h in logs)
    out = {"stage_s_per_rollout": stages, "generated_tokens_per_s": sum(completion_tokens) / max(generation_s, 1e-9)}
    if peak_flops:  # 6 N T: the body over every token of a row, the LM head over its completion tokens only
        all_tokens = statistics.fmean(h["rollout/tokens"] for h in logs)
        flops = 6 * (body_params * all_tokens + head_params * statistics.fmean(completion_tokens))
        out["train_mfu"] = flops / max(stages["forward_backward_s"], 1e-9) / peak_flops
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sdar.gpu_check", description=__doc__)
    parser.add_argument("--output", type=Path, default=Path("runs/sdar/gpu_check"))
    parser.add_argument("--vllm", action="store_true", help="generate with TRL's vLLM colocate engine (needs vLLM)")
    ns = parser.parse_args(argv)
    require_gpu(ns.vllm)
    import torch
    from transformers import AutoConfig

    import agentrl_shared.rollout
    import agentrl_shared.trainer

    from .cli import load, train

    clock = SynchronizedClock()
    agentrl_shared.trainer.time = agentrl_shared.rollout.time = clock
    single_process_deepspeed_env()
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None)
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    generation = "vLLM colocate" if ns.vllm else "HF generate"
    figures: dict = {"device": name, "bf16_peak_flops": peak, "generation": generation}
    for method, extra in {"grpo": ["trainer.sdar_coef=0.0"], "sdar": []}.items():
        torch.cuda.reset_peak_memory_stats()
        out = ns.output / method
        overrides = [*OVERRIDES, *(VLLM_OVERRIDES if ns.vllm else []), *extra, f"trainer.output_dir={out}",
                     f"trainer.deepspeed={ds}"]  # fmt: skip
        payload = train(load("textrooms_smollm2-135m_cpu", overrides), f"gpu_check_{method}")
        body, head = matmul_parameters(AutoConfig.from_pretrained(out / "final"))
        figures[method] = {**summarize_run(payload["log_history"], peak, body, head),
                           "matmul_parameters": {"body": body, "lm_head": head},
                           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}  # fmt: skip
    ns.output.mkdir(parents=True, exist_ok=True)
    (ns.output / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"device: {name} (bf16 peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s), generation: {generation}")
    for method in ("grpo", "sdar"):
        f = figures[method]
        stages = ", ".join(f"{k.removesuffix('_s')} {v:.2f}s" for k, v in f["stage_s_per_rollout"].items())
        mfu = f"{100 * f['train_mfu']:.1f}%" if "train_mfu" in f else "n/a"
        print(
            f"{method}: per rollout {stages}; generated {f['generated_tokens_per_s']:.0f} tok/s; "
            f"train MFU {mfu}; peak memory {f['peak_memory_gib']:.1f} GiB"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
