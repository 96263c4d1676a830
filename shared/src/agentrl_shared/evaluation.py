"""Evaluation on fixed task panels: resumable episode logs, success rates, pass@k, results JSON with provenance.

A panel is the same ordered task list every time (the first N tasks of a split), played once per seed. Episodes are
appended to a JSONL file as they finish, so an interrupted evaluation resumes without replaying them. Results carry
the git commit, the resolved config and the seeds.
"""

import hashlib
import json
import logging
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from .config import ConfigError
from .provenance import git_commit, redact
from .rollout import Episode, RolloutCollector, episode_metrics


logger = logging.getLogger(__name__)


def episode_record(ep: Episode) -> dict:
    """What an evaluation log keeps of an episode (no token ids)."""
    return {
        "task_id": ep.task["task_id"],
        "task_type": ep.task.get("task_type"),
        "seed": ep.seed,
        "won": ep.won,
        "failed": ep.failed,
        "error": ep.error,
        "stop_reason": ep.stop_reason,
        "turns": len(ep.rows),
        "env_return": ep.env_return,
        "task_score": ep.info.get("task_score"),
        "invalid_actions": sum(not r.is_action_valid for r in ep.rows),
        "actions": [r.action for r in ep.rows],
    }


def model_identity(path: str) -> dict:
    """Which model a local directory holds: its resolved path and a content fingerprint (sha256 of its config, weight
    index, and each weight file's name, size, first and last MiB: cheap for a 7B checkpoint, and different for two
    checkpoints of the same architecture)."""
    root = Path(path).resolve()
    digest = hashlib.sha256()
    for file in sorted(root.glob("*.json")) + sorted(root.glob("*.safetensors")) + sorted(root.glob("*.bin")):
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with file.open("rb") as f:
            if file.suffix == ".json":
                digest.update(f.read())
            else:
                digest.update(f.read(1 << 20))
                f.seek(max(size - (1 << 20), 0))
                digest.update(f.read())
    return {"model": str(root), "fingerprint": digest.hexdigest()[:16]}


def panel_identity(tasks: list[dict], seeds: list[int]) -> str:
    """A short hash of a panel: its task ids in order and its seeds."""
    return hashlib.sha256(json.dumps([[t["task_id"] for t in tasks], seeds]).encode()).hexdigest()[:16]


def check_log_identity(log_path: Path, identity: dict) -> None:
    """Refuse to resume an episode log that another model (or another panel) wrote: `<log>.identity.json` beside the
    log names who wrote it (`model_identity` plus `panel`, `panel_identity`); a log without one predates identities
    and cannot be trusted either. A new log gets its identity file."""
    id_path = log_path.with_suffix(".identity.json")
    if log_path.exists() and log_path.stat().st_size > 0:
        found = json.loads(id_path.read_text()) if id_path.exists() else None
        if found != identity:
            wrote = f"{found['model']} (fingerprint {found['fingerprint']})" if found else "an unknown model"
            raise ConfigError(
                f"{log_path} holds episodes of {wrote}, not of {identity['model']} (fingerprint "
                f"{identity['fingerprint']}, panel {identity['panel']}): pass another --output or remove that folder."
            )
    else:
        id_path.parent.mkdir(parents=True, exist_ok=True)
        id_path.write_text(json.dumps(identity, indent=2) + "\n")


def run_panel(
    collector: RolloutCollector,
    generate: Callable,
    tasks: list[dict],
    seeds: list[int],
    log_path: Path | None = None,
    progress: Callable[[str], None] = logger.info,
) -> list[dict]:
    """Play every (task, seed) pair in chunks of the pool's size; returns one record per pair, in panel order.

    With `log_path`, finished records are read back first and new ones appended as each chunk ends (resume; the
    caller checks first that the log is this model's, `check_log_identity`).
    """
    done: dict[tuple[str, int], dict] = {}
    if log_path is not None and log_path.exists():
        for line in log_path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                done[(rec["task_id"], rec["seed"])] = rec
    todo = [(t, s) for s in seeds for t in tasks if (t["task_id"], s) not in done]
    if done:
        progress(f"resuming: {len(done)} episodes already logged, {len(todo)} to go")
    slots = collector.pool.num_slots
    t0 = time.perf_counter()
    for start in range(0, len(todo), slots):
        chunk = todo[start : start + slots]
        episodes = collector.collect([t for t, _ in chunk], list(range(len(chunk))), [s for _, s in chunk], generate)
        records = [episode_record(e) for e in episodes]
        for rec in records:
            done[(rec["task_id"], rec["seed"])] = rec
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with log_path.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
        n = min(start + slots, len(todo))
        wins = sum(r["won"] for r in done.values())
        progress(f"eval {n}/{len(todo)} episodes, success so far {wins}/{len(done)}, {time.perf_counter() - t0:.0f}s")
    return [done[(t["task_id"], s)] for s in seeds for t in tasks]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n - c, k) / C(n, k) for c successes in n tries."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def summarize(records: list[dict], seeds: list[int]) -> dict:
    """Success rate per seed (mean +- std over seeds), per task type, and pass@k over seeds per task.

    A failed episode (environment crash or timeout) counts as a failure, as the official evaluation counts every
    episode of the panel (verl-agent `success_evaluator`); `failed_episodes` reports how many there were.
    """
    per_seed = []
    for s in seeds:
        mine = [r for r in records if r["seed"] == s]
        per_seed.append(sum(r["won"] and not r["failed"] for r in mine) / max(len(mine), 1))
    out = {
        "success_rate_per_seed": per_seed,
        "success_rate_mean": statistics.fmean(per_seed) if per_seed else 0.0,
        "success_rate_std": statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0,
        "num_episodes": len(records),
        "failed_episodes": sum(r["failed"] for r in records),
        "invalid_action_ratio": sum(r["invalid_actions"] for r in records) / max(sum(r["turns"] for r in records), 1),
        "turns_mean": statistics.fmean(r["turns"] for r in records) if records else 0.0,
    }
    for task_type in sorted({str(r["task_type"]) for r in records}):
        mine = [r for r in records if str(r["task_type"]) == task_type]
        out[f"{task_type}_success_rate"] = sum(r["won"] and not r["failed"] for r in mine) / max(len(mine), 1)
        out[f"{task_type}_failed_episodes"] = sum(r["failed"] for r in mine)
    scores = [r["task_score"] for r in records if r["task_score"] is not None]
    if scores:
        out["score_mean"] = statistics.fmean(scores)
    by_task: dict[str, list[bool]] = {}
    for r in records:
        by_task.setdefault(r["task_id"], []).append(bool(r["won"]))
    for k in range(1, len(seeds) + 1):
        out[f"pass@{k}"] = statistics.fmean(pass_at_k(len(v), sum(v), k) for v in by_task.values())
    return out


def write_results(path: Path, payload: dict) -> None:
    """Write a results JSON with provenance (commit, time) next to the run's other files, secrets redacted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = redact({"commit": git_commit(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **payload})
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


__all__ = [
    "check_log_identity",
    "episode_metrics",
    "model_identity",
    "panel_identity",
    "pass_at_k",
    "run_panel",
    "summarize",
    "write_results",
]
