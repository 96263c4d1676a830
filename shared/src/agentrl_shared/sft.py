"""Supervised fine-tuning on rollout rows' completions: the format warm starts of the CPU scale (EnvACE's tool calls
and rehearsals, SkillRise's curated documents). No paper trains this way; the papers' models already write the formats.
"""

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .rollout import Row


logger = logging.getLogger(__name__)


def sft(model, rows: list[Row], learning_rate: float, epochs: int, batch_rows: int, max_grad_norm: float = 1.0,
        seed: int = 0) -> list[float]:  # fmt: skip
    """Supervised fine-tuning on the rows' completions: AdamW, `batch_rows` rows per optimizer step, loss = summed
    token cross-entropy over the step's completion tokens / their count. Returns the loss of every step."""
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    rng = random.Random(seed)
    losses = []
    model.train()
    for epoch in range(epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_rows):
            t0 = time.perf_counter()
            batch = [rows[i] for i in order[start : start + batch_rows]]
            n_tokens = sum(len(r.completion_ids) for r in batch)
            total = 0.0
            for r in batch:  # one row per forward: no padding
                ids = torch.tensor([r.prompt_ids + r.completion_ids], device=model.device)
                logits = model(ids).logits[0, len(r.prompt_ids) - 1 : -1]  # (completion, vocab)
                target = torch.tensor(r.completion_ids, device=model.device)
                loss = torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum") / n_tokens
                loss.backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(total)
            logger.info(f"warm start epoch {epoch} step {len(losses)}: loss {total:.4f} "
                        f"({len(batch)} rows, {time.perf_counter() - t0:.1f} s)")  # fmt: skip
    model.eval()
    return losses


def warm_start_run(cfg: dict, method: str, out: Path, resolved: dict, roles: tuple[str, ...],
                   gold: Callable[[object], tuple[list[Row], dict]]) -> dict:  # fmt: skip
    """A package's warm-start run in `out`: load `model.name_or_path`, build the gold rows (`gold(tokenizer)` returns
    them and extra result fields), `sft` them with the `warmstart:` settings, save the model to `out/final` and write
    `results.json` (rows per role in `roles`, tokens, losses, seconds, `resolved` config). Returns the payload."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .evaluation import write_results
    from .models import model_path

    args, model_cfg, ws = cfg["trainer"], cfg["model"], cfg["warmstart"]
    path = model_path(model_cfg.name_or_path)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, model_cfg.dtype))
    torch.manual_seed(args.seed)
    rows, extra = gold(tok)
    t0 = time.perf_counter()
    losses = sft(model, rows, ws.learning_rate, ws.epochs, ws.batch_rows, args.max_grad_norm, args.seed)
    seconds = time.perf_counter() - t0
    model.save_pretrained(out / "final")
    tok.save_pretrained(out / "final")
    payload = {
        "method": method,
        "model": model_cfg.name_or_path,
        "seed": args.seed,
        "rows": {role: sum(r.role == role for r in rows) for role in roles},
        "tokens": sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows),
        "completion_tokens": sum(len(r.completion_ids) for r in rows),
        **extra,
        "losses": losses,
        "train_seconds": seconds,
        "config": resolved,
    }
    write_results(out / "results.json", payload)
    logger.info(f"warm start: {len(rows)} rows, loss {losses[0]:.3f} -> {losses[-1]:.3f}, {seconds:.0f} s")
    return payload
