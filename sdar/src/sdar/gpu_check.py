"""`python -m sdar.gpu_check` (`make gpu-check`): a short check of the GPU path on a lent GPU.

SDAR and plain GRPO train 2 rollouts each on SmolLM2-135M-Instruct (a real Llama architecture, built offline) on
TextRooms, with TRL's vLLM colocate generation under DeepSpeed ZeRO-3 in bf16. Printed per method: seconds per
rollout by stage (generation, weight sync, old/ref/teacher log-probs, forward-backward, environment), generated
tokens per second, training MFU against the GPU's dense bf16 peak, and peak GPU memory. Figures are written to
`<output>/gpu_check.json`. Without CUDA or vLLM it stops at once with the reason.
"""

import argparse
import json
import os
import socket
import statistics
import sys
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
    "trainer.use_vllm=true",
    "trainer.vllm_mode=colocate",
    "trainer.vllm_gpu_memory_utilization=0.3",
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


def require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("sdar.gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here); run it on a GPU "
                         "node with `make gpu-check`.")  # fmt: skip
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise SystemExit(
            "sdar.gpu_check needs vLLM: `uv sync --locked --extra vllm` (make gpu-check does it)."
        ) from None


def single_process_deepspeed_env() -> None:
    """ZeRO-3 on one GPU without a launcher (the variables `accelerate launch` would set)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "ACCELERATE_USE_DEEPSPEED": "true"}  # fmt: skip
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def summarize_run(payload: dict, peak_flops: float | None, n_params: int) -> dict:
    logs = [h for h in payload["log_history"] if "rollout/rows" in h]
    steps = [h for h in payload["log_history"] if "time/forward_backward_s" in h]
    stages = {k.removeprefix("time/"): statistics.fmean(h.get(k, 0.0) for h in logs)
              for k in sorted({k for h in logs for k in h if k.startswith("time/")})}  # fmt: skip
    stages["forward_backward_s"] = sum(h["time/forward_backward_s"] for h in steps) / max(len(logs), 1)
    generated = sum(h["rollout/rows"] * h["completions/mean_length"] for h in logs)
    gen_s = sum(h.get("time/generate_s", 0.0) for h in logs)
    trained_tokens = sum(h["rollout/tokens"] for h in logs) / len(logs)
    out = {"stage_s_per_rollout": stages, "generated_tokens_per_s": generated / max(gen_s, 1e-9)}
    if peak_flops:  # 6 N T for the training forward and backward
        out["train_mfu"] = 6 * n_params * trained_tokens / max(stages["forward_backward_s"], 1e-9) / peak_flops
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sdar.gpu_check", description=__doc__)
    parser.add_argument("--output", type=Path, default=Path("runs/sdar/gpu_check"))
    ns = parser.parse_args(argv)
    require_gpu()
    import torch

    from .cli import load, train

    single_process_deepspeed_env()
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None)
    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    figures: dict = {"device": name, "bf16_peak_flops": peak}
    for method, extra in {"grpo": ["trainer.sdar_coef=0.0"], "sdar": []}.items():
        torch.cuda.reset_peak_memory_stats()
        out = ns.output / method
        cfg = load("textrooms_smollm2-135m_cpu", [*OVERRIDES, *extra, f"trainer.output_dir={out}",
                                                  f"trainer.deepspeed={ds}"])  # fmt: skip
        payload = train(cfg, f"gpu_check_{method}")
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(out / "final")
        n_params = 12 * config.num_hidden_layers * config.hidden_size**2 + config.vocab_size * config.hidden_size
        figures[method] = {**summarize_run(payload, peak, n_params),
                           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}  # fmt: skip
    ns.output.mkdir(parents=True, exist_ok=True)
    (ns.output / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"device: {name} (bf16 peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s)")
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
