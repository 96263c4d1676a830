"""`python -m sdar.bench`: where the CPU main job's time goes, and SDAR's costs side by side as ratios.
Every figure is printed with its wall-clock and CPU (process) time: on a shared
machine wall time is noisy, CPU time much less so.

1. Main job time split: `textrooms_smollm2-135m_cpu` (the config `sdar reproduce --scale cpu` trains), SDAR, two
   rollouts and one evaluation pass, timed by stage: generation (multi-turn rollout: generate + environment),
   no-grad log-prob forwards (old / reference / teacher), loss forward, backward, the rest of the optimizer step, and
   the evaluation pass over the fixed panel.
2. Batched rollout against its ceiling, SmolLM2-135M, TextRooms, greedy, the CPU config's precision: 16 episodes (one training
   rollout) played one at a time, played together (one generation call per turn), and the ceiling: the same per-turn
   prompt batches given to `generate` alone (no prompt building, tokenising or environment). Claims: batched /
   sequential speedup, and batched time as a fraction of the ceiling (`batched_over_ceiling` = ceiling / batched).
3. Evaluation pass: the 64-task panel in one batch against chunks of 16 (the old pool size), same episodes.
4. Teacher forward: which forward dominates (the student's loss forward + backward, the teacher's plain forward,
   its shared-prefix forward) on the CPU config's rows and at the paper config's lengths (`teacher_forward`).
5. Step time of SDAR over GRPO on the CPU config (the only difference is the teacher forward).
6. Loss forward (`loss_forward`): the policy's forward with grad and its backward, TRL's plain forward against the
   shared-prefix one (`shared_prefix_policy`), on a sampled CPU-config rollout; with the largest log-prob and
   gradient differences between the two.
Figures are merged under `sdar/` into `bench-results.json` at the repository root after each section, with the
commit and `--note` (the load) of the section (`sdar/provenance/<section>`); `--sections` runs a subset. Run order:
2, 1, 3, 4, 5, 6.
"""

import json
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import yaml

from agentrl_shared.offline import set_offline_env

from .cli import CPU_CONFIG


set_offline_env()

ROOT = Path(__file__).resolve().parents[3]
PAPER_CONFIG = "alfworld_qwen2.5-7b_paper"  # the paper shapes of the teacher-forward section
STEP_ROLLOUTS = 3  # rollouts per step-time run (one optimizer step each on the CPU config)


class Clock:
    """Wall-clock and CPU seconds per named stage."""

    def __init__(self):
        self.wall, self.cpu = defaultdict(float), defaultdict(float)

    @contextmanager
    def __call__(self, stage: str):
        w, c = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[stage] += time.perf_counter() - w
            self.cpu[stage] += time.process_time() - c


@contextmanager
def stage_timers(clock: Clock):
    """Time the trainer's stages by wrapping the methods that run them (bench only; restored on exit)."""
    from accelerate import Accelerator

    from agentrl_shared.rollout import RolloutCollector

    from .trainer import SDARTrainer

    inside_eval = [False]

    def timed(cls, name, stage):
        original = getattr(cls, name)

        def wrapper(*args, **kwargs):
            if inside_eval[0]:  # generation inside an evaluation pass counts as evaluation
                return original(*args, **kwargs)
            inside_eval[0] = stage == "evaluation pass"
            try:
                with clock(stage):
                    return original(*args, **kwargs)
            finally:
                inside_eval[0] = False

        setattr(cls, name, wrapper)
        return cls, name, original

    patches = [
        timed(RolloutCollector, "collect", "generation"),
        timed(SDARTrainer, "_logps", "no-grad forwards (teacher/old/ref)"),
        timed(SDARTrainer, "_compute_loss", "loss forward"),
        timed(Accelerator, "backward", "backward"),
        timed(SDARTrainer, "training_step", "training steps"),
        timed(SDARTrainer, "evaluate_panel", "evaluation pass"),
    ]
    try:
        yield
    finally:
        for cls, name, original in patches:
            setattr(cls, name, original)


def main_job_split(rollouts: int = 2) -> dict:
    """Train the CPU config for `rollouts` rollouts and evaluate once; seconds per stage (per rollout for training)."""
    from .cli import load, train

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp, stage_timers(clock):
        cfg = load(CPU_CONFIG, [f"trainer.num_rollouts={rollouts}", f"trainer.output_dir={tmp}", "env.eval_every=0"])
        with clock("run total"):
            payload = train(cfg, "bench")
    n = payload["rollouts"]
    # trainer.train = training steps (rollout: generation, no-grad forwards, batching; micro-batches: loss forward,
    # backward) + optimizer steps, logging and callbacks
    stages = ("generation", "no-grad forwards (teacher/old/ref)", "loss forward", "backward")
    split = {f"{k}_s_per_rollout": {"wall": clock.wall[k] / n, "cpu": clock.cpu[k] / n} for k in stages}
    split["batching and other_s_per_rollout"] = {
        kind: (getattr(clock, kind)["training steps"] - sum(getattr(clock, kind)[k] for k in stages)) / n
        for kind in ("wall", "cpu")
    }
    split["optimizer step and logging_s_per_rollout"] = {
        "wall": (payload["train_seconds"] - clock.wall["training steps"]) / n,
        "cpu": None,
    }
    split["training total_s_per_rollout"] = {"wall": payload["train_seconds"] / n, "cpu": None}
    split["evaluation pass_s"] = {"wall": clock.wall["evaluation pass"], "cpu": clock.cpu["evaluation pass"]}
    split["rollouts"] = n
    # the CPU plan from this split: untrained evaluation, then each method of `CPU_PLAN` (GRPO without the teacher
    # forward), R rollouts and its evaluation passes each (model loading and start-up not counted)
    from .cli import CPU_PLAN

    plan_cfg = load(CPU_CONFIG, [])
    R, env = plan_cfg["trainer"].num_rollouts, plan_cfg["env"]
    evals = R // env.eval_every + int(env.eval_before_train) + int(R % env.eval_every != 0)
    for kind in ("wall", "cpu"):
        rollout = sum(split[f"{k}_s_per_rollout"][kind] for k in (*stages, "batching and other"))
        rollout += split["optimizer step and logging_s_per_rollout"]["wall"]
        teacher, ev = split["no-grad forwards (teacher/old/ref)_s_per_rollout"][kind], split["evaluation pass_s"][kind]
        per_method = [rollout - (teacher if method == "grpo" else 0.0) for method in CPU_PLAN]
        split[f"estimated_reproduce_one_seed_s_{kind}"] = ev + R * sum(per_method) + len(CPU_PLAN) * evals * ev
    split["rows_per_rollout"] = statistics.fmean(
        h["rollout/rows"] for h in payload["log_history"] if "rollout/rows" in h
    )
    return split


def _smollm2():
    """SmolLM2-135M and its HF generator in the CPU config's precision (bf16 autocast only where it asks for it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.models import model_path

    from .cli import load

    path = model_path("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    dtype = torch.bfloat16 if load(CPU_CONFIG, [])["trainer"].bf16 else None
    return tok, model, HFGenerator(model, tok, max_new_tokens=12, temperature=0.0, autocast_dtype=dtype)


def _collector(tok, slots: int):
    from agentrl_shared.envs import make_env
    from agentrl_shared.envs.pool import EnvPool
    from agentrl_shared.prompts import make_prompt
    from agentrl_shared.rollout import RolloutCollector

    pool = EnvPool(lambda: make_env("textrooms"), num_slots=slots, num_workers=0)
    return pool, RolloutCollector(pool, make_prompt("textrooms", 2), tok, max_turns=2, max_prompt_length=1024)


def batched_rollout_vs_ceiling(episodes: int = 16, repeats: int = 2) -> dict:
    """Sequential vs batched rollout vs `generate` alone on the batched rollout's own prompt batches."""
    from agentrl_shared.envs import load_tasks

    tok, _, generate = _smollm2()
    tasks = load_tasks("textrooms", "valid_seen", num_tasks=episodes, num_rooms=3)
    seeds = [1000] * episodes
    pool, collector = _collector(tok, episodes)
    calls: list[list[list[int]]] = []

    def recording(prompt_ids):
        calls.append(prompt_ids)
        return generate(prompt_ids)

    clock = Clock()
    with pool:
        collector.collect(tasks[:2], [0, 1], seeds[:2], generate)  # warm-up
        for _ in range(repeats):  # ABC ABC: drift on a shared machine hits every arm alike
            with clock("sequential"):
                for i, task in enumerate(tasks):
                    collector.collect([task], [i], [seeds[i]], generate)
            calls.clear()
            with clock("batched"):
                batched = collector.collect(tasks, list(range(episodes)), seeds, recording)
            with clock("ceiling"):
                for prompt_ids in calls:
                    generate(prompt_ids)
    out = {f"{k}_s": {"wall": clock.wall[k] / repeats, "cpu": clock.cpu[k] / repeats} for k in clock.wall}
    out["episodes"], out["turn_batches"] = episodes, [len(c) for c in calls]
    out["tokens_generated"] = sum(len(r.completion_ids) for e in batched for r in e.rows)
    for kind in ("wall", "cpu"):
        seq, bat, ceil = (out[f"{k}_s"][kind] for k in ("sequential", "batched", "ceiling"))
        out[f"batched_speedup_{kind}"] = seq / bat
        out[f"ceiling_speedup_{kind}"] = seq / ceil
        out[f"batched_over_ceiling_{kind}"] = ceil / bat
    return out


def evaluation_pass(panel: int = 64, chunk: int = 16, repeats: int = 1) -> dict:
    """The fixed panel played in one batch against chunks of `chunk` episodes (greedy, the CPU config's precision)."""
    from agentrl_shared.envs import load_tasks
    from agentrl_shared.evaluation import run_panel

    tok, _, generate = _smollm2()
    tasks = load_tasks("textrooms", "valid_seen", num_tasks=panel, num_rooms=3)
    clock, results = Clock(), {}
    for _ in range(repeats):
        for slots in (chunk, panel):
            pool, collector = _collector(tok, slots)
            generate.batch_size = slots
            with pool, clock(f"slots{slots}"):
                results[slots] = run_panel(collector, generate, tasks, [1000], progress=lambda _: None)
    same = sum(a["actions"] == b["actions"] for a, b in zip(results[chunk], results[panel], strict=True))
    out = {f"chunks_of_{chunk}_s": {"wall": clock.wall[f"slots{chunk}"] / repeats,
                                    "cpu": clock.cpu[f"slots{chunk}"] / repeats},
           f"one_pass_of_{panel}_s": {"wall": clock.wall[f"slots{panel}"] / repeats,
                                      "cpu": clock.cpu[f"slots{panel}"] / repeats},
           "episodes_with_identical_actions": same, "episodes": panel}  # fmt: skip
    for kind in ("wall", "cpu"):
        out[f"one_pass_speedup_{kind}"] = out[f"chunks_of_{chunk}_s"][kind] / out[f"one_pass_of_{panel}_s"][kind]
    return out


# the trainer's no-grad chunks (`log_prob_micro_batch_rows`, rows ordered by prompt length: `StepPlan.chunks`), and
# the same chunk size in rollout order (the trainer before it ordered them)
CHUNKED = "teacher forward, shared prefix, log-prob chunks"
CHUNKED_IN_ORDER = "teacher forward, shared prefix, log-prob chunks in rollout order"


def _time_forwards(model, batches: list[dict], pad: int, repeats: int, backward: bool = True,
                   chunks: dict[str, list[dict]] | None = None) -> dict:  # fmt: skip
    """Seconds per pass over `batches` of: the student forward with grad and its backward (the loss forward; without
    `backward`, its no-grad forward only), the teacher's plain no-grad forward (TRL's) and its shared-prefix forward
    (`agentrl_shared.prefix`), interleaved; with `chunks` (name -> the same rows cut into no-grad chunks of
    `log_prob_micro_batch_rows`), also the shared-prefix teacher forward over each."""
    import torch

    from agentrl_shared.prefix import shared_prefix_logps

    def plain(ids, mask, c_ids, c_mask, grad=False):
        input_ids, attn = torch.cat([ids, c_ids], 1), torch.cat([mask, c_mask], 1)
        labels = input_ids.masked_fill(attn == 0, -100)  # TRL `_get_per_token_logps_and_entropies`
        labels[:, : -c_ids.size(1)] = -100
        with torch.set_grad_enabled(grad):
            return model(input_ids=input_ids, attention_mask=attn, labels=labels, fused_lm_head=True).log_probs

    clock, gap = Clock(), 0.0
    for _ in range(repeats):
        for b in batches:
            c = (b["completion_ids"], b["completion_mask"])
            with clock("student loss forward + backward" if backward else "student forward, no grad"):
                logps = plain(b["prompt_ids"], b["prompt_mask"], *c, grad=backward)
                if backward:
                    logps.sum().backward()
            with clock("teacher forward, plain"):
                ref = plain(b["teacher_prompt_ids"], b["teacher_prompt_mask"], *c)[:, -c[0].size(1) :]
            with torch.no_grad(), clock("teacher forward, shared prefix"):
                shared = shared_prefix_logps(model, b["teacher_prompt_ids"], b["teacher_prompt_mask"], *c, pad)
            gap = max(gap, (ref - shared)[c[1].bool()].abs().max().item())
        for name, cut in (chunks or {}).items():
            for b in cut:
                with torch.no_grad(), clock(name):
                    shared_prefix_logps(model, b["teacher_prompt_ids"], b["teacher_prompt_mask"], b["completion_ids"],
                                        b["completion_mask"], pad)  # fmt: skip
    model.zero_grad(set_to_none=True)
    out = {k: {"wall": clock.wall[k] / repeats, "cpu": clock.cpu[k] / repeats} for k in clock.wall}
    for kind in ("wall", "cpu"):
        plain_s = out["teacher forward, plain"][kind]
        out[f"teacher_plain_over_shared_{kind}"] = plain_s / out["teacher forward, shared prefix"][kind]
        if chunks:
            out[f"teacher_plain_over_shared_chunks_{kind}"] = plain_s / out[CHUNKED][kind]
            out[f"teacher_in_order_over_length_ordered_chunks_{kind}"] = (
                out[CHUNKED_IN_ORDER][kind] / out[CHUNKED][kind]
            )
    out["max_abs_logp_diff"] = gap
    out["teacher_tokens"] = int(sum(b["teacher_prompt_mask"].sum() for b in batches))
    out["student_tokens"] = int(sum(b["prompt_mask"].sum() for b in batches))
    out["completion_tokens"] = int(sum(b["completion_mask"].sum() for b in batches))
    out["rows"] = int(sum(b["prompt_ids"].size(0) for b in batches))
    return out


def teacher_forward(repeats: int = 2, paper_rows: int = 4) -> dict:
    """Which forward dominates, and the shared-prefix teacher forward against the plain one, at two shapes.

    - `cpu`: the CPU config's rows: one SDAR training rollout of 16 TextRooms episodes (SmolLM2-135M sampled at the
      config's temperature, seeded, with the config's completion cap, prompt length, history and skills), cut into
      its `micro_batch_rows` micro-batches in rollout order, and the teacher also over the trainer's no-grad chunks
      of `log_prob_micro_batch_rows` rows (ordered by prompt length, `StepPlan.chunks`) and over chunks of that size
      in rollout order.
    - `paper`: `PAPER_CONFIG`'s lengths with SmolLM2-135M: teacher prompts of `max_prompt_length`
      (the ALFWorld skill block of one task type, then the rest of the row's prompt: random tokens, no two rows
      alike past the block), completions of `max_completion_length`; `paper_rows` rows of one task (a 32-row
      micro-batch of 8 episodes x 50 turns holds rows of one or two tasks), 1 micro-batch, no backward (the
      student's no-grad forward instead: a backward at these lengths takes GBs on this machine).
    fp32 (the CPU config's precision); `max_abs_logp_diff`: shared-prefix vs plain log-probs of the same rows.
    """
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from agentrl_shared.batch import plan_steps, rows_to_batch
    from agentrl_shared.envs import load_tasks
    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.skills import skill_block, teacher_prompt, teacher_skills

    from .cli import load

    tok, model, _ = _smollm2()
    cpu = load(CPU_CONFIG, [])
    args = cpu["trainer"]
    add_fused_lm_head(model, temperature=args.temperature)
    pad, micro = tok.pad_token_id, args.micro_batch_rows
    chunk = args.log_prob_micro_batch_rows or micro
    # sampled at the training temperature (seeded), so that a group's second-turn prompts differ as in training
    generate = HFGenerator(model, tok, max_new_tokens=args.max_completion_length, temperature=args.temperature)
    tasks = load_tasks("textrooms", "train", **cpu["env"].task_kwargs)[:2]
    pool, collector = _collector(tok, 16)
    collector.teacher_transform = lambda text, task: teacher_prompt(text, teacher_skills("textrooms", task, text))
    torch.manual_seed(0)
    with pool, torch.no_grad():
        episodes = collector.collect([t for t in tasks for _ in range(8)], [i // 8 for i in range(16)], [0] * 16,
                                     generate)  # fmt: skip
    rows = [r for e in episodes for r in e.rows]

    def cut(parts: list[list[int]]) -> list[dict]:  # the rows of each part, with their teacher prompts
        return [
            rows_to_batch([rows[i].prompt_ids for i in part], [rows[i].completion_ids for i in part],
                          [True] * len(part), [0.0] * len(part), pad,
                          teacher_prompts=[rows[i].teacher_prompt_ids for i in part])[0]
            for part in parts
        ]  # fmt: skip

    def in_order(n: int) -> list[list[int]]:
        return [list(range(i, min(i + n, len(rows)))) for i in range(0, len(rows), n)]

    plan = plan_steps([len(r.prompt_ids) for r in rows], [1] * len(rows), 1, micro, 1)  # one rank, as the trainer
    trainer_chunks = plan.chunks(0, chunk, [r.teacher_prompt_ids for r in rows])
    batches = cut(in_order(micro))
    chunks = {CHUNKED: cut(trainer_chunks), CHUNKED_IN_ORDER: cut(in_order(chunk))}
    out = {"cpu": _time_forwards(model, batches, pad, repeats, chunks=chunks)}
    out["cpu"]["micro_batch_rows"], out["cpu"]["log_prob_micro_batch_rows"] = micro, chunk

    paper = yaml.safe_load((Path(__file__).parent / "configs" / f"{PAPER_CONFIG}.yaml").read_text())  # as written
    P, C = paper["env"]["max_prompt_length"], paper["trainer"]["max_completion_length"]
    block = tok(skill_block(teacher_skills("alfworld", {"gamefile": "pick_and_place_simple"}, "")))["input_ids"]
    g = torch.Generator().manual_seed(0)
    rests = [torch.randint(100, len(tok) - 100, (n,), generator=g).tolist() for n in [P - len(block)] * paper_rows]
    completions = [torch.randint(100, len(tok) - 100, (C,), generator=g).tolist() for _ in range(paper_rows)]
    batch = rows_to_batch(rests, completions, [True] * paper_rows, [0.0] * paper_rows, pad,
                          teacher_prompts=[block + r for r in rests])[0]  # fmt: skip
    out["paper"] = _time_forwards(model, [batch], pad, 1, backward=False)
    out["paper"]["skill_block_tokens"] = len(block)
    return out


def loss_forward(repeats: int = 1) -> dict:
    """The policy's loss forward with grad + backward, plain (TRL's) against shared prefix, interleaved.

    Rows: one training rollout of the CPU config (2 tasks x G = 8 episodes of TextRooms, SmolLM2-135M sampled at the
    config's temperature, seeded, so that a group's second-turn prompts differ as in training), cut into its
    `micro_batch_rows` micro-batches as the trainer cuts them (`plan_steps` on one rank: ordered by prompt length),
    and, for the shared-prefix forward, also in rollout order (the trainer before it ordered them). The loss:
    token-mean of advantage x log-prob plus the entropy bonus, i.e. the terms whose gradient the forwards must agree
    on. fp32, the CPU config's precision. `max_abs_logp_diff` / `max_abs_grad_diff`: shared vs plain, over every
    row; `max_abs_grad_diff_in_order`: the rollout-order micro-batches' gradient vs the plain one.
    """
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from agentrl_shared.batch import plan_steps, rows_to_batch
    from agentrl_shared.envs import load_tasks
    from agentrl_shared.generation import HFGenerator
    from agentrl_shared.prefix import prefix_plan, shared_prefix_logps_and_entropies

    from .cli import load

    tok, model, _ = _smollm2()
    cpu = load(CPU_CONFIG, [])
    args = cpu["trainer"]
    add_fused_lm_head(model, temperature=args.temperature, outputs=("log_probs", "entropy"))  # as GRPOTrainer
    pad, micro, G = tok.pad_token_id, args.micro_batch_rows, args.num_generations
    generate = HFGenerator(model, tok, max_new_tokens=args.max_completion_length, temperature=args.temperature)
    tasks = load_tasks("textrooms", "train", **cpu["env"].task_kwargs)[:2]
    pool, collector = _collector(tok, 2 * G)
    torch.manual_seed(0)
    with pool:
        episodes = collector.collect([t for t in tasks for _ in range(G)], [i // G for i in range(2 * G)],
                                     [0] * (2 * G), generate)  # fmt: skip
    rows = [r for e in episodes for r in e.rows]
    g = torch.Generator().manual_seed(0)
    advantages = torch.randn(len(rows), generator=g).tolist()  # any values: both forwards get the same

    def cut(parts: list[list[int]]) -> list[dict]:
        return [rows_to_batch([rows[i].prompt_ids for i in part], [rows[i].completion_ids for i in part],
                              [True] * len(part), [advantages[i] for i in part], pad)[0] for part in parts if part]  # fmt: skip

    plan = plan_steps([len(r.prompt_ids) + len(r.completion_ids) for r in rows], [1] * len(rows), 1, micro,
                      -(-len(rows) // micro), prompts=[r.prompt_ids for r in rows])  # fmt: skip
    batches = cut(plan.micro_batches(0))  # one optimizer step, as the CPU config's rollout makes
    in_order = cut([list(range(i, min(i + micro, len(rows)))) for i in range(0, len(rows), micro)])
    n_tokens = sum(int(b["completion_mask"].sum()) for b in batches)
    model.train()

    def plain(b):  # TRL `_get_per_token_logps_and_entropies` (trl 1.16)
        ids = torch.cat([b["prompt_ids"], b["completion_ids"]], 1)
        mask = torch.cat([b["prompt_mask"], b["completion_mask"]], 1)
        C = b["completion_ids"].size(1)
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-C] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -C:], out.entropy[:, -C:]

    def shared(b):
        return shared_prefix_logps_and_entropies(model, b["prompt_ids"], b["prompt_mask"], b["completion_ids"],
                                                 b["completion_mask"], pad, compute_entropy=True)  # fmt: skip

    clock, logps, grads = Clock(), {}, {}
    IN_ORDER = "shared prefix, micro-batches in rollout order"
    for _ in range(repeats):
        for name, forward, cut_ in (("plain", plain, batches), ("shared prefix", shared, batches),
                                    (IN_ORDER, shared, in_order)):  # fmt: skip
            model.zero_grad(set_to_none=True)
            with clock(f"loss forward + backward, {name}"):
                for k, b in enumerate(cut_):
                    lp, ent = forward(b)
                    m = b["completion_mask"].float()
                    loss = -((lp * b["advantages"][:, None] + args.entropy_coef * ent) * m).sum() / n_tokens
                    loss.backward()
                    logps[name, k] = lp.detach()[b["completion_mask"].bool()]
            grads[name] = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    out = {k: {"wall": clock.wall[k] / repeats, "cpu": clock.cpu[k] / repeats} for k in clock.wall}
    for kind in ("wall", "cpu"):
        shared_s = out["loss forward + backward, shared prefix"][kind]
        out[f"plain_over_shared_{kind}"] = out["loss forward + backward, plain"][kind] / shared_s
        out[f"in_order_over_ordered_{kind}"] = out[f"loss forward + backward, {IN_ORDER}"][kind] / shared_s
    out["max_abs_logp_diff"] = max((logps["plain", k] - logps["shared prefix", k]).abs().max().item()
                                   for k in range(len(batches)))  # fmt: skip
    out["max_abs_grad_diff"] = max((a - b).abs().max().item() for a, b in zip(grads["plain"], grads["shared prefix"],
                                                                               strict=True))  # fmt: skip
    out["max_abs_grad_diff_in_order"] = max((a - b).abs().max().item() for a, b in zip(grads["plain"], grads[IN_ORDER],
                                                                                        strict=True))  # fmt: skip
    out["max_abs_grad"] = max(a.abs().max().item() for a in grads["plain"])
    out["rows"], out["micro_batches"] = len(rows), len(batches)
    out["prompt_tokens"] = int(sum(b["prompt_mask"].sum() for b in batches))
    # tokens the shared path runs: each micro-batch's prefixes once, plus every row's rest of the prompt
    run = 0
    for b in batches:
        prompts = [row[m.bool()].tolist() for row, m in zip(b["prompt_ids"], b["prompt_mask"], strict=True)]
        group, prefix_len, _ = prefix_plan(prompts)
        run += sum(prefix_len) + sum(len(p) - prefix_len[group[i]] for i, p in enumerate(prompts))
    out["shared_prompt_tokens_run"] = run
    out["completion_tokens"] = n_tokens
    return out


def step_times(overrides: list[str]) -> list[float]:
    """Seconds per optimizer step (TRL's `step_time`, the rollout included) on the CPU config, no evaluation."""
    from .cli import load, train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load(CPU_CONFIG, [f"trainer.num_rollouts={STEP_ROLLOUTS}", f"trainer.output_dir={tmp}",
                                "env.eval_every=0", *overrides])  # fmt: skip
        payload = train(cfg, "bench")
    times = [h["step_time"] for h in payload["log_history"] if "step_time" in h]
    return times[1:]  # the first step pays one-off costs (JIT, allocator warm-up)


def merge(figures: dict) -> None:
    """Merge under `sdar/`: the figures of the sections run replace theirs, each section keeps its commit/note."""
    path = ROOT / "bench-results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({f"sdar/{k}": v for k, v in figures.items() if k not in ("commit", "note", "sections", "config")})
    for section in figures["sections"]:
        data[f"sdar/provenance/{section}"] = {"commit": figures["commit"], "note": figures["note"],
                                             "config": figures["config"][section]}  # fmt: skip
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _print_teacher(tf: dict) -> None:
    print(f"\n{'teacher forward against the loss forward (s)':46s} {'wall':>8s} {'cpu':>8s}")
    for shape in ("cpu", "paper"):
        f = tf[shape]
        print(f"  {shape}: {f['rows']} rows; prompt tokens {f['teacher_tokens']} teacher, {f['student_tokens']} "
              f"student; {f['completion_tokens']} completion tokens")  # fmt: skip
        for stage in [k for k in f if isinstance(f[k], dict)]:
            print(f"    {stage:42s} {f[stage]['wall']:8.2f} {f[stage]['cpu']:8.2f}")
        print(f"    {'teacher plain / shared prefix':42s} {f['teacher_plain_over_shared_wall']:8.2f} "
              f"{f['teacher_plain_over_shared_cpu']:8.2f}   max |logp diff| {f['max_abs_logp_diff']:.1e}")  # fmt: skip
        if "teacher_plain_over_shared_chunks_wall" in f:
            print(f"    {'teacher plain / shared prefix, chunks':42s} {f['teacher_plain_over_shared_chunks_wall']:8.2f} "
                  f"{f['teacher_plain_over_shared_chunks_cpu']:8.2f}   ({f['log_prob_micro_batch_rows']}-row chunks, "
                  f"{f['micro_batch_rows']}-row micro-batches)")  # fmt: skip
        if "teacher_in_order_over_length_ordered_chunks_wall" in f:
            print(f"    {'chunks in rollout order / by length':42s} "
                  f"{f['teacher_in_order_over_length_ordered_chunks_wall']:8.2f} "
                  f"{f['teacher_in_order_over_length_ordered_chunks_cpu']:8.2f}")  # fmt: skip


SECTIONS = ("rollout", "main_job_split", "evaluation_pass", "teacher_forward", "step_time", "loss_forward")


def main(argv: list[str] | None = None) -> None:
    import argparse

    from agentrl_shared.provenance import git_commit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections",
        nargs="*",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="sections to run (default: all); other sections' figures in bench-results.json stay",
    )
    parser.add_argument("--note", default="", help="the load the figures were measured under, stored with them")
    args = parser.parse_args(argv)  # fmt: skip
    commit = git_commit()  # before the bench writes bench-results.json, a tracked file
    figures = {"commit": commit, "note": args.note, "sections": args.sections,
               "config": {"main_job_split": f"{CPU_CONFIG}, SDAR, 2 rollouts + 1 evaluation pass (64 episodes)",
                          "evaluation_pass": "textrooms valid_seen, 64 tasks, one pass against chunks of 16",
                          "rollout": "textrooms, SmolLM2-135M, greedy, CPU config precision, 16 episodes, 2 turns",
                          "teacher_forward": f"{CPU_CONFIG} rollout rows; {PAPER_CONFIG} lengths; SmolLM2, fp32",
                          "step_time": f"{CPU_CONFIG}, {STEP_ROLLOUTS} rollouts, first dropped",
                          "loss_forward": f"{CPU_CONFIG} sampled rollout rows (seed 0); SmolLM2, fp32"}}  # fmt: skip
    if "rollout" in args.sections:
        roll = figures["rollout"] = batched_rollout_vs_ceiling()
        print(f"\n{'rollout, 16 episodes (s)':38s} {'sequential':>10s} {'batched':>8s} {'ceiling':>8s} "
              f"{'speedup':>8s} {'ceiling':>8s} {'batched/ceiling':>15s}")  # fmt: skip
        for kind in ("wall", "cpu"):
            seq, bat, ceil = (roll[f"{k}_s"][kind] for k in ("sequential", "batched", "ceiling"))
            print(f"  {kind:36s} {seq:10.2f} {bat:8.2f} {ceil:8.2f} {seq / bat:8.2f} {seq / ceil:8.2f} "
                  f"{ceil / bat:15.2f}")  # fmt: skip
        merge(figures)  # written after every section: a long bench interrupted keeps what it measured

    if "main_job_split" in args.sections:
        split = figures["main_job_split"] = main_job_split()
        print(f"\nmain job ({CPU_CONFIG}, SDAR), seconds per rollout unless noted    wall      cpu")
        for key, value in split.items():
            if isinstance(value, dict):
                print(f"  {key.removesuffix('_s_per_rollout').removesuffix('_s'):58s} {_fmt(value['wall']):>8s} "
                      f"{_fmt(value['cpu']):>8s}")  # fmt: skip
        print(f"  rows per rollout: {split['rows_per_rollout']:.1f}")
        print(
            f"  estimated `sdar reproduce --scale cpu` (one seed, from this split): "
            f"{split['estimated_reproduce_one_seed_s_wall'] / 60:.1f} min wall, "
            f"{split['estimated_reproduce_one_seed_s_cpu'] / 60:.1f} min from CPU time"
        )
        merge(figures)

    if "evaluation_pass" in args.sections:
        ev = figures["evaluation_pass"] = evaluation_pass()
        print(f"\n{'evaluation, 64 episodes (s)':38s} {'chunks 16':>10s} {'one pass':>8s} {'speedup':>8s}")
        for kind in ("wall", "cpu"):
            a, b = ev["chunks_of_16_s"][kind], ev["one_pass_of_64_s"][kind]
            print(f"  {kind:36s} {a:10.2f} {b:8.2f} {a / b:8.2f}")
        print(f"  episodes with identical actions: {ev['episodes_with_identical_actions']}/{ev['episodes']}")
        merge(figures)

    if "teacher_forward" in args.sections:
        figures["teacher_forward"] = teacher_forward()
        _print_teacher(figures["teacher_forward"])
        merge(figures)

    if "step_time" in args.sections:
        grpo = step_times(["trainer.sdar_coef=0.0"])
        sdar = step_times([])
        figures["grpo_step_time_s"] = statistics.median(grpo)
        figures["sdar_step_time_s"] = statistics.median(sdar)
        figures["step_time_ratio_sdar_over_grpo"] = figures["sdar_step_time_s"] / figures["grpo_step_time_s"]
        print(f"\n{'step time, ' + CPU_CONFIG + ' (s)':38s} {'GRPO':>10s} {'SDAR':>8s} {'ratio':>8s}")
        print(f"  {'wall, median':36s} {figures['grpo_step_time_s']:10.2f} {figures['sdar_step_time_s']:8.2f} "
              f"{figures['step_time_ratio_sdar_over_grpo']:8.2f}")  # fmt: skip
        merge(figures)

    if "loss_forward" in args.sections:
        lf = figures["loss_forward"] = loss_forward()
        print(f"\nloss forward + backward, {lf['rows']} rows in {lf['micro_batches']} micro-batches; prompt tokens "
              f"{lf['prompt_tokens']} plain, {lf['shared_prompt_tokens_run']} shared; {lf['completion_tokens']} "
              f"completion tokens (s)     wall      cpu")  # fmt: skip
        for stage in [k for k in lf if isinstance(lf[k], dict)]:
            print(f"  {stage:44s} {lf[stage]['wall']:8.2f} {lf[stage]['cpu']:8.2f}")
        print(f"  {'plain / shared prefix':44s} {lf['plain_over_shared_wall']:8.2f} {lf['plain_over_shared_cpu']:8.2f}"
              f"   max |logp diff| {lf['max_abs_logp_diff']:.1e}, max |grad diff| {lf['max_abs_grad_diff']:.1e} "
              f"(max |grad| {lf['max_abs_grad']:.1e})")  # fmt: skip
        print(f"  {'rollout-order / length-ordered micro-batches':44s} {lf['in_order_over_ordered_wall']:8.2f} "
              f"{lf['in_order_over_ordered_cpu']:8.2f}   max |grad diff| to plain "
              f"{lf['max_abs_grad_diff_in_order']:.1e}")  # fmt: skip
        merge(figures)


if __name__ == "__main__":
    main()
