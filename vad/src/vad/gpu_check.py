"""`python -m vad.gpu_check --output DIR [--budget-s 420] [--quick]`: VAD's two checks that need a GPU, in one
single-process run (plain torch, no DeepSpeed, no vLLM) under a hard time budget.

1. Divergence memory at paper shape (issue: "chunk the (batch, completion, vocab) logits"): the package's own loss
   path (`losses.chunked_support_logps` + `losses.vad_token_losses`, reduced as `VADTrainer._compute_loss` does) on
   bf16 logits of the paper configs' micro-batch (2) x `max_completion_length` (1024) x the Qwen vocabularies
   (151,936: Qwen2.5-VL / Qwen3-VL; 248,320: Qwen3.5), top-K 100: peak GPU memory with the completion chunking
   (`logit_chunk_size` 256) and without it (`losses.support_logps` on the whole fp32 logits; an OOM is caught and
   recorded), and max |diff| of loss and logit gradients chunked vs unchunked. -> `DIR/divergence_memory.json`.
2. The x0 learning signal with a larger tiny VLM (`warmstart.tiny_vlm`: 4-block ViT of width 128, up to 64 image
   tokens) on a sub-patch task: 448 px images that the processor shows the student at 224 px (x0: the texture's cells
   are 7 px, half a ViT patch), while x+ (the 2x evidence crop, 112 px, not resized) shows them as whole 14 px patches;
   x- pixelates the patch to one flat pixel. A warm start is trained on x+ only (`warmstart.supervised`), then from
   it: `base` (the warm start as is), `vad` and `direct` (the package's `cli.train`: `VADTrainer` + the panel
   evaluation) and `sft_x0` (supervised on x0 with the same number of questions, an upper bound), each scored on the
   fixed panel for x0 / x+ / x- (`cli.evaluate`). -> `DIR/arm_<name>.json` as each arm finishes, `DIR/x0_signal.png`.

Every stage checks the clock: what does not fit in the budget is written as `{"skipped": "budget"}`; trainings stop
at their share of the budget (the steps done are recorded). `--quick`: toy sizes on whatever device is present
(CPU: a few minutes on one core), to check the script before it runs on a GPU.
"""

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from agentrl_shared.offline import set_offline_env


set_offline_env()

logger = logging.getLogger("vad.gpu_check")

VOCABS = {"qwen2.5-vl/qwen3-vl": 151_936, "qwen3.5": 248_320}  # config.json `vocab_size` of the paper models
# (micro-batch, completion length, vocabulary) cases of stage 1; the first of each size is compared numerically
FULL_SHAPES = [(2, 1024, 151_936), (2, 1024, 248_320), (16, 1024, 248_320)]
QUICK_SHAPES = [(2, 64, 4096)]
# stage 2 sizes: the task (2x zoom between x0 and x+: x0 is shrunk by the processor to max_image_tokens x 28^2 px)
FULL_TASK = {"image_size": 448, "detail_size": 56, "cell": 14, "align": 56, "distractors": 6, "crop_context": 2.0,
             "colours": ["black", "white"], "degrade_scale": 0.018}  # fmt: skip
QUICK_TASK = {"image_size": 224, "detail_size": 28, "cell": 7, "align": 28, "distractors": 6, "crop_context": 2.0,
              "colours": ["black", "white"], "degrade_scale": 0.036}  # fmt: skip
FULL_VLM = {"max_image_tokens": 64, "vision_depth": 4, "vision_width": 128, "num_layers": 2}
QUICK_VLM = {"max_image_tokens": 16}
FULL_PLAN = {"warm_steps": 500, "warm_batch": 32, "warm_lr": 1e-3, "rl_steps": 120, "prompts": 16, "rollouts": 2,
             "rl_lr": 5e-4, "sft_lr": 5e-4, "num_eval": 120}  # fmt: skip
QUICK_PLAN = {"warm_steps": 6, "warm_batch": 8, "warm_lr": 3e-3, "rl_steps": 2, "prompts": 2, "rollouts": 2,
              "rl_lr": 1e-3, "sft_lr": 1e-3, "num_eval": 6}  # fmt: skip
SHARES = {"vad": 0.5, "sft_x0": 0.4, "direct": 0.9}  # of the time left (after the evaluation reserve) when it starts


class Clock:
    """Seconds left of the budget, with a margin kept for writing the results."""

    def __init__(self, budget_s: float, margin_s: float):
        self.end = time.monotonic() + budget_s - margin_s

    def left(self) -> float:
        return self.end - time.monotonic()


def write(out: Path, name: str, obj: dict) -> None:
    (out / name).write_text(json.dumps(obj, indent=2, default=str) + "\n")
    print(f"[vad.gpu_check] wrote {out / name}", flush=True)


def say(msg: str) -> None:
    print(f"[vad.gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------- stage 1: divergence


def divergence_loss(student_logits, pos_logits, neg_logits, mask, *, chunk_size: int | None, support_k: int = 100):
    """VAD's per-token loss L_vis + lambda a_t L_reg (Eq. 10) token-meaned, from raw (B, C, V) logits, through the
    package's functions as `VADTrainer._compute_loss` calls them. `chunk_size=None`: no chunking
    (`losses.support_logps` on the whole fp32 logits, what the chunking replaces)."""
    import torch

    from . import losses
    from .config import VADConfig

    defaults = VADConfig.__dataclass_fields__  # the paper values of the loss switches
    if chunk_size is None:
        top_idx = torch.topk(student_logits.detach(), support_k, dim=-1).indices  # (B, C, K)
        student = losses.support_logps(student_logits.float(), top_idx)
        with torch.no_grad():
            pos = losses.support_logps(pos_logits.float(), top_idx)
            neg = losses.support_logps(neg_logits.float(), top_idx)
    else:
        student, top_idx = losses.chunked_support_logps(student_logits, k=support_k, chunk_size=chunk_size)
        with torch.no_grad():
            pos, _ = losses.chunked_support_logps(pos_logits, top_idx, chunk_size=chunk_size)
            neg, _ = losses.chunked_support_logps(neg_logits, top_idx, chunk_size=chunk_size)
    terms = losses.vad_token_losses(student.double(), pos.double(), neg.double(),
                                    tau_plus=defaults["tau_plus"].default)  # fmt: skip
    per_token = (terms["vis"] + defaults["reg_weight"].default * terms["reg_weight"] * terms["reg"]).float()
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def divergence_case(shape: tuple[int, int, int], device: str, chunk_size: int | None, compare: dict | None) -> dict:
    """One forward + backward of `divergence_loss` on random bf16 logits of `shape`; peak memory (CUDA) above the
    inputs; with `compare` (a dict) also returns the loss and gradient for the numerical comparison."""
    import torch

    b, c, v = shape
    gen = torch.Generator(device=device).manual_seed(0)

    def logits():  # drawn on the device (a 16 x 1024 x 248k draw on the CPU takes tens of seconds)
        return (torch.randn(b, c, v, generator=gen, device=device) * 3).to(torch.bfloat16)

    cuda = device.startswith("cuda")
    record = {"batch": b, "completion": c, "vocab": v, "chunk_size": chunk_size}
    student = pos = neg = None
    try:
        student, pos, neg = logits().requires_grad_(True), logits(), logits()
        mask = torch.ones(b, c, device=device)
        mask[:, c - c // 8 :] = 0  # padded tail
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        started = time.perf_counter()
        loss = divergence_loss(student, pos, neg, mask, chunk_size=chunk_size)
        loss.backward()
        if cuda:
            torch.cuda.synchronize()
            record["peak_above_inputs_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
            record["inputs_gib"] = base / 2**30
        record["seconds"] = round(time.perf_counter() - started, 3)
        record["loss"] = loss.item()
        if compare is not None:
            compare["loss"], compare["grad"] = loss.detach().double(), student.grad
    except torch.OutOfMemoryError as err:
        record["oom"] = str(err).split("\n")[0][:300]
    finally:
        del student, pos, neg
        if cuda:
            torch.cuda.empty_cache()
    return record


def stage_divergence(out: Path, device: str, quick: bool, clock: Clock, share_s: float) -> None:
    """Peak memory chunked vs unchunked per shape, and max |diff| of loss and gradients on the first shape."""
    import torch

    shapes = QUICK_SHAPES if quick else FULL_SHAPES
    stop = time.monotonic() + share_s
    result = {"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
              "logits_dtype": "bfloat16", "support_k": 100, "vocabularies": VOCABS, "cases": []}  # fmt: skip
    if device.startswith("cuda"):
        result["total_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    for i, shape in enumerate(shapes):
        for chunk in (16 if quick else 256, None):  # quick: several chunks over its 64 positions
            if time.monotonic() > stop or clock.left() < 30:
                result["cases"].append({"shape": shape, "chunk_size": chunk, "skipped": "budget"})
                continue
            say(f"divergence {shape} chunk={chunk}")
            compare = {} if i == 0 else None
            record = divergence_case(shape, device, chunk, compare)
            if compare:
                result.setdefault("_compare", {})[str(chunk)] = compare
            result["cases"].append(record)
            say(f"  -> {json.dumps(record)}")
        write(out, "divergence_memory.json", {k: v for k, v in result.items() if k != "_compare"})
    pair = result.pop("_compare", {})
    if len(pair) == 2:
        a, b = pair[str(16 if quick else 256)], pair["None"]
        result["chunked_vs_unchunked"] = {
            "shape": shapes[0],
            "max_abs_diff_loss": (a["loss"] - b["loss"]).abs().item(),
            "max_abs_diff_grad": (a["grad"].float() - b["grad"].float()).abs().max().item(),
            "max_abs_grad": b["grad"].float().abs().max().item(),
            "grad_dtype": str(b["grad"].dtype),
        }
    write(out, "divergence_memory.json", result)


# ------------------------------------------------------------------------------------------ stage 2: x0 signal


class Deadline:
    """A `TrainerCallback` that stops training once `time.monotonic()` passes `end`."""

    def __new__(cls, end: float):
        from transformers import TrainerCallback

        class _Deadline(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if time.monotonic() > end:
                    logger.info("training stopped at step %d (time budget)", state.global_step)
                    control.should_training_stop = True
                return control

        return _Deadline()


def panel_scores(scores: dict) -> dict:
    """{view: accuracy} from `cli.evaluate`'s result (procedural = x0, procedural_x+ = x+, procedural_x- = x-)."""
    names = {"procedural": "x0", "procedural_x+": "x+", "procedural_x-": "x-"}
    return {names.get(k, k): v for k, v in scores["scores"].items()}


def stage_signal(out: Path, device: str, quick: bool, clock: Clock, seed: int = 0) -> None:
    task, vlm, plan = (QUICK_TASK, QUICK_VLM, QUICK_PLAN) if quick else (FULL_TASK, FULL_VLM, FULL_PLAN)
    runs = out / "runs"
    arms = ("base", "vad", "sft_x0", "direct")
    summary = {"task": task, "vlm": vlm, "plan": plan, "device": device, "seed": seed, "arms": {}}
    if clock.left() < 60:  # not even the model build, the warm start and one evaluation
        for arm in arms:
            summary["arms"][arm] = {"arm": arm, "skipped": "budget", "seconds_left": round(clock.left(), 1)}
            write(out, f"arm_{arm}.json", summary["arms"][arm])
        write(out, "x0_signal.json", summary)
        return
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from . import cli
    from .evaluation import HFGenerator
    from .warmstart import WARM_START_STREAM, LazySamples, supervised, tiny_vlm

    work = Path(tempfile.mkdtemp(prefix="vad-gpu-check-"))  # the warm start's weights (not results)
    try:
        say("stage 2: building the tiny VLM")
        base_path = tiny_vlm(seed=seed, **vlm)
        processor = AutoProcessor.from_pretrained(base_path, padding_side="left")
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(base_path).to(device)
        summary["parameters"] = sum(p.numel() for p in model.parameters())
        summary["vision_parameters"] = sum(p.numel() for p in model.model.visual.parameters())

        overrides = [f"data.{k}={json.dumps(v)}" for k, v in task.items()] + [
            "data.eval_views=[full,plus,minus]", f"data.num_eval={plan['num_eval']}", "data.eval_batch_size=32",
            "data.x0_contrast=1.0", "trainer.lr_scheduler_type=linear",  # as in the filed H200 run (745411c)
            f"trainer.use_cpu={str(not device.startswith('cuda')).lower()}", "trainer.bf16=false",
            f"trainer.per_device_train_batch_size={plan['prompts'] * plan['rollouts']}",
            f"trainer.num_generations={plan['rollouts']}", f"trainer.max_steps={plan['rl_steps']}",
            f"data.num_train={plan['rl_steps'] * plan['prompts']}", f"trainer.seed={seed}",
        ]  # fmt: skip

        def evaluate(arm: str, m) -> dict:
            cfg = cli.load(cli.SCALE_CONFIGS["cpu"], overrides)
            return panel_scores(cli.evaluate(cfg, runs / arm / "eval", HFGenerator(m, processor, 4)))

        def finish(arm: str, record: dict) -> None:
            summary["arms"][arm] = record
            write(out, f"arm_{arm}.json", record)
            say(f"{arm}: {json.dumps(record.get('panel', record))}")

        # warm start: supervised on x+ only, at most a quarter of what is left
        started = time.monotonic()
        samples = LazySamples(WARM_START_STREAM, **task)
        say(f"warm start on x+: up to {plan['warm_steps']} steps x {plan['warm_batch']}")
        torch.manual_seed(seed)
        steps = supervised(model, processor, samples, view="plus", steps=plan["warm_steps"],
                           batch_size=plan["warm_batch"], learning_rate=plan["warm_lr"],
                           deadline=time.monotonic() + 0.25 * clock.left())  # fmt: skip
        warm = work / "warm"
        model.save_pretrained(warm)
        processor.save_pretrained(warm)
        warm_s = time.monotonic() - started
        started = time.monotonic()
        finish("base", {"arm": "base", "warm_steps": steps, "warm_seconds": round(warm_s, 1),
                        "panel": evaluate("base", model)})  # fmt: skip
        eval_s = time.monotonic() - started
        model.cpu()

        def run_arm(arm: str, share: float) -> dict:
            started = time.monotonic()
            if arm == "sft_x0":  # supervised on x0 from the warm start, as many questions as the RL arms saw
                student = Qwen2_5_VLForConditionalGeneration.from_pretrained(warm).to(device)
                n = summary["arms"]["vad"].get("steps", plan["rl_steps"]) * plan["prompts"]
                sft = LazySamples(seed, **task)  # the RL arms' row stream (`trainer.seed`)
                torch.manual_seed(seed)
                done = supervised(student, processor, sft, view="full", steps=max(1, n // plan["warm_batch"]),
                                  batch_size=plan["warm_batch"], learning_rate=plan["sft_lr"],
                                  deadline=started + share)  # fmt: skip
                record = {"arm": arm, "steps": done, "questions": done * plan["warm_batch"],
                          "learning_rate": plan["sft_lr"], "panel": evaluate(arm, student)}  # fmt: skip
                del student
            else:
                cfg = cli.load(cli.SCALE_CONFIGS["cpu"], [*overrides, f"model.name_or_path={warm}",
                                                          f"trainer.learning_rate={plan['rl_lr']}"],
                               method=arm)  # fmt: skip
                result = cli.train(cfg, str(runs), callbacks=[Deadline(started + share)])
                logs = [h for h in result["log_history"] if "vad/vis_loss" in h]
                record = {"arm": arm, "steps": result["steps"], "learning_rate": plan["rl_lr"],
                          "train_seconds": result["train_seconds"], "panel": panel_scores(result),
                          "vis_loss_first_last": [logs[0]["vad/vis_loss"], logs[-1]["vad/vis_loss"]] if logs else None,
                          "reward_first_last": [logs[0].get("reward"), logs[-1].get("reward")] if logs else None}  # fmt: skip
            return record

        # trained arms: each may use its share of what is left after reserving its evaluation
        rl_s = None
        for arm in arms[1:]:
            left = clock.left() - 1.5 * eval_s - 10
            share = SHARES[arm] * left
            if share < 20 or (rl_s is not None and arm == "direct" and share < 0.5 * rl_s):
                finish(arm, {"arm": arm, "skipped": "budget", "seconds_left": round(clock.left(), 1)})
                continue
            say(f"{arm}: up to {share:.0f} s")
            started = time.monotonic()
            try:
                record = run_arm(arm, share)
            except Exception as err:  # one failing arm must not cost the others their GPU time
                logger.exception("%s failed", arm)
                record = {"arm": arm, "error": repr(err)[:500]}
            if arm != "sft_x0":
                rl_s = time.monotonic() - started
            record["seconds"] = round(time.monotonic() - started, 1)
            finish(arm, record)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    finally:
        write(out, "x0_signal.json", summary)
        plot(out, summary)
        shutil.rmtree(work, ignore_errors=True)


def plot(out: Path, summary: dict) -> None:
    """Bar chart: accuracy on x0 / x+ / x- per arm (chance 1/3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a, r in summary["arms"].items() if "panel" in r]
    if not arms:
        return
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for j, view in enumerate(("x0", "x+", "x-")):
        ax.bar([i + 0.27 * (j - 1) for i in range(len(arms))], [summary["arms"][a]["panel"].get(view, 0) for a in arms],
               width=0.27, label=view)  # fmt: skip
    ax.axhline(100 / 3, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylim(0, 100)
    ax.set_ylabel("panel accuracy %")
    ax.set_title(f"VAD x0 signal, sub-patch task ({summary['device']}, seed {summary['seed']})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "x0_signal.png")
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- entry


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m vad.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--output",
        default="runs/vad/gpu_check",
        help="folder for the JSON results and the plot (default runs/vad/gpu_check)",
    )
    p.add_argument("--budget-s", type=float, default=420.0, help="hard time budget of the whole run (default 420)")
    p.add_argument("--quick", action="store_true", help="toy sizes on any device (a CPU check of the script)")
    p.add_argument("--seed", type=int, default=0, help="model init, warm-start and trainer seed of stage 2 (the task "
                   "panel and the training rows stay fixed; default 0)")  # fmt: skip
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    clock = Clock(ns.budget_s, margin_s=min(20.0, 0.05 * ns.budget_s))
    out = Path(ns.output)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not ns.quick:
        say("no CUDA device: the full sizes need a GPU (use --quick for a CPU check of the script)")
    say(f"device {device}, budget {ns.budget_s:.0f} s, quick={ns.quick}, torch {torch.__version__}")
    write(out, "run.json", {"device": device, "budget_s": ns.budget_s, "quick": ns.quick, "seed": ns.seed, "torch": torch.__version__,
                            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})  # fmt: skip
    try:
        stage_divergence(out, device, ns.quick, clock, share_s=0.2 * clock.left())
    except Exception:  # stage 2 still gets its time
        logger.exception("stage 1 (divergence memory) failed")
    stage_signal(out, device, ns.quick, clock, ns.seed)
    say(f"done, {clock.left():.0f} s of the budget left")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
