"""BFCL-v4 (Berkeley Function Calling Leaderboard) through the `bfcl-eval` package's CLI, in its own uv environment.

Isolation: `bfcl-eval` pins numpy 1.26.4, which our workspace lock cannot hold, so it lives in a separate uv project,
`envace/bfcl/` (its own `pyproject.toml` and `uv.lock`, not a workspace member). Every call here is a subprocess
`uv run --locked --project envace/bfcl bfcl ...`; uv builds that environment on first use (about 6 GB: bfcl-eval
pulls torch through sentence-transformers) and reuses it. envace never imports `bfcl_eval`.

Protocol (the paper does not publish its BFCL settings; package README "Deviations"): the checkpoint is served
behind an OpenAI-compatible endpoint (`vllm serve` on GPU, `agentrl_shared.serve` on CPU) and driven by BFCL's own
Qwen3 function-calling handler `Qwen/Qwen3-8B-FC` (`--skip-server-setup`, endpoint in `REMOTE_OPENAI_BASE_URL`, the
checkpoint's tokenizer from `--local-model-path`): BFCL renders the Qwen3 chat template with the tools itself,
calls `/v1/completions`, and parses the `<tool_call>` blocks. `bfcl evaluate` scores the result files with the
checkers shipped in the package. Results and scores go under a folder we name (`BFCL_PROJECT_ROOT`).

Categories: every shipped category that runs offline (`OFFLINE`); those that need the network are listed in
`NEEDS_NETWORK` with the reason and reported as skipped, never silently dropped. `v4_summary` aggregates the
per-category accuracies as the V4 leaderboard does (bfcl-eval's `generate_leaderboard_csv`): the group accuracies,
the multi-turn mean, and, since the agentic group (web search, memory_vector) cannot run offline, an overall over
the offline groups with the leaderboard's weights renormalised, next to the leaderboard's formula with the absent
categories at 0 (a lower bound).
"""

import json
import os
import subprocess
from pathlib import Path


PROJECT = Path("envace") / "bfcl"  # relative to the repository root (where `make` and `envace` run)
HANDLER = "Qwen/Qwen3-8B-FC"  # bfcl-eval's Qwen3 FC handler (Qwen3 chat template, `<tool_call>` parsing)
NON_LIVE = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
            "irrelevance"]  # fmt: skip
LIVE = [
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
]
MULTI_TURN = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
OFFLINE = NON_LIVE + LIVE + MULTI_TURN
# the categories whose shipped gold answers the adapter test scores (bfcl/gold.py); Java / JavaScript values must be
# rendered as Java / JS source text, which gold.py does not do
GOLD_CHECKED = [c for c in OFFLINE if c not in ("simple_java", "simple_javascript")]
# offline, but driven by BFCL's agentic memory loop or the format-sensitivity sweep: run by `bfcl generate`
# like the others; the gold-answer test does not cover them
OFFLINE_NOT_GOLD_CHECKED = ["memory_kv", "memory_rec_sum", "format_sensitivity"]
# BFCL V4 leaderboard aggregation, as `bfcl_eval/eval_checker/eval_runner_helper.py::generate_leaderboard_csv` of
# bfcl-eval 2026.3.23 (the version pinned in envace/bfcl/pyproject.toml): ("mean", members) is its
# `calculate_unweighted_accuracy` (a plain mean of the members), ("count", members) its `calculate_weighted_accuracy`
# (weighted by each category's number of entries); the overall is `calculate_percentage_weighted_accuracy` over the
# five groups with the weights 10, 10, 10, 30, 40 (normalised to sum 1). live_relevance and format_sensitivity are
# shown by the leaderboard but enter no group.
V4_GROUPS = {
    "non_live": ("mean", [("mean", ["simple_python", "simple_java", "simple_javascript"]), "multiple", "parallel",
                          "parallel_multiple"]),
    "live": ("count", ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"]),
    "irrelevance": ("mean", ["irrelevance", "live_irrelevance"]),
    "multi_turn": ("mean", MULTI_TURN),
    "agentic": ("mean", [("mean", ["web_search_base", "web_search_no_snippet"]),
                         ("mean", ["memory_kv", "memory_vector", "memory_rec_sum"])]),
}  # fmt: skip
V4_WEIGHTS = {"non_live": 10, "live": 10, "irrelevance": 10, "multi_turn": 30, "agentic": 40}
OFFLINE_GROUPS = ["non_live", "live", "irrelevance", "multi_turn"]  # agentic needs web search and memory_vector
NEEDS_NETWORK = {
    "web_search_base": "queries a live web search API (SerpAPI key) for every step",
    "web_search_no_snippet": "queries a live web search API (SerpAPI key) for every step",
    "memory_vector": "downloads a sentence-transformers embedding model from the Hugging Face Hub",
}


def bfcl(args: list[str], root: Path, project: Path = PROJECT, env: dict | None = None,
         timeout: float | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """Run `bfcl ARGS` (or `python ARGS` when args[0] ends in .py) in the isolated environment, results under `root`."""
    if not (project / "pyproject.toml").exists():
        raise FileNotFoundError(f"BFCL environment {project}/pyproject.toml not found; run from the repository root "
                                "or pass the path of envace/bfcl")  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    head = ["python"] if args[0].endswith(".py") else ["bfcl"]
    cmd = ["uv", "run", "--locked", "--project", str(project), *head, *args]
    full_env = {**os.environ, "BFCL_PROJECT_ROOT": str(root.resolve()), **(env or {})}
    full_env.pop("VIRTUAL_ENV", None)  # the workspace venv must not leak into the isolated one
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


def scores(root: Path, model: str = HANDLER) -> dict:
    """Per-category accuracy from the score files `bfcl evaluate` wrote (first line of each
    `score/<model>/**/BFCL_v4_<category>_score.json`)."""
    out = {}
    for path in sorted((root / "score" / model.replace("/", "_")).rglob("BFCL_v4_*_score.json")):
        category = path.name.removeprefix("BFCL_v4_").removesuffix("_score.json")
        with path.open() as f:
            head = json.loads(f.readline())
        out[category] = {"accuracy": head["accuracy"], "correct": head["correct_count"], "total": head["total_count"]}
    return out


def _leaves(node) -> list[str]:
    return [node] if isinstance(node, str) else [c for m in node[1] for c in _leaves(m)]


def _accuracy(node, scores: dict, absent_zero: bool = False) -> float | None:
    """A group's accuracy by the leaderboard's formula (`V4_GROUPS`). An absent category is left out of its mean
    (None when nothing under the node was scored), or counts 0 with `absent_zero` as on the leaderboard
    (`get_category_score`: "N/A" shown, 0 in the overall); "count" nodes weigh the present categories by entries."""
    if isinstance(node, str):
        return scores[node]["accuracy"] if node in scores else (0.0 if absent_zero else None)
    how, members = node
    if how == "count":  # calculate_weighted_accuracy
        present = [m for m in members if m in scores]
        total = sum(scores[m]["total"] for m in present)
        return sum(scores[m]["accuracy"] * scores[m]["total"] for m in present) / total if present else None
    values = [v for v in (_accuracy(m, scores, absent_zero) for m in members) if v is not None]
    return sum(values) / len(values) if values else None  # calculate_unweighted_accuracy


def v4_summary(scores: dict) -> dict:
    """BFCL V4 group accuracies, multi-turn mean and overall from per-category scores (`scores()`), fractions in [0, 1].

    - `groups[g]`: the leaderboard's group accuracy over the categories that were scored, and the `missing` ones
      (none missing: exactly the leaderboard's figure; `multi_turn` is the leaderboard's "Multi Turn Overall Acc").
    - `overall_offline`: the leaderboard's weights renormalised over the four groups that run offline,
      (10 non_live + 10 live + 10 irrelevance + 30 multi_turn) / 60; None unless all their categories were scored.
      The agentic group (weight 40) is absent: web_search_* need a live search API and memory_vector an embedding
      model from the Hub (`NEEDS_NETWORK`). Not the leaderboard's overall, so not comparable with published V4
      overalls.
    - `overall_leaderboard_absent_zero`: the leaderboard's own formula with every absent category at 0 (what
      bfcl-eval's `data_overall.csv` shows for such a run): a lower bound of the V4 overall; None unless the four
      offline groups are complete.
    """
    groups = {g: {"accuracy": _accuracy(node, scores), "missing": [c for c in _leaves(node) if c not in scores]}
              for g, node in V4_GROUPS.items()}  # fmt: skip
    complete = all(not groups[g]["missing"] for g in OFFLINE_GROUPS)
    offline = sum(V4_WEIGHTS[g] * groups[g]["accuracy"] for g in OFFLINE_GROUPS) if complete else None
    agentic = _accuracy(V4_GROUPS["agentic"], scores, absent_zero=True)
    return {
        "groups": groups,
        "multi_turn_mean": groups["multi_turn"]["accuracy"],
        "overall_offline": offline / sum(V4_WEIGHTS[g] for g in OFFLINE_GROUPS) if complete else None,
        "overall_leaderboard_absent_zero": (offline + V4_WEIGHTS["agentic"] * agentic) / sum(V4_WEIGHTS.values())
        if complete else None,
        "weights": V4_WEIGHTS,
        "source": "bfcl-eval 2026.3.23, bfcl_eval/eval_checker/eval_runner_helper.py::generate_leaderboard_csv",
    }  # fmt: skip


def evaluate(root: Path, categories: list[str], model: str = HANDLER, project: Path = PROJECT,
             partial: bool = False) -> dict:  # fmt: skip
    """`bfcl evaluate` on the result files under `root`; returns `scores(root)`."""
    args = ["evaluate", "--model", model, "--test-category", ",".join(categories)]
    bfcl(args + (["--partial-eval"] if partial else []), root, project)
    return scores(root, model)


def run_bfcl(base_url: str, checkpoint: str, root: Path, categories: list[str] | None = None,
             ids: dict[str, list[str]] | None = None, project: Path = PROJECT, num_threads: int = 1,
             rehearsal: dict | None = None) -> dict:  # fmt: skip
    """Generate with the served checkpoint and evaluate. `ids` (category -> test ids) restricts the run to a slice
    (BFCL's `--run-ids`, scored with `--partial-eval`). `rehearsal` (budget, mode, temperature, top_p, max_steps,
    max_tokens): generate through `bfcl/rehearse.py`, BFCL's Qwen3 FC handler with test-time private rehearsal
    (`tts_chat.PrivateRehearsal`; attempts logged to `root/rehearsals.jsonl`). Writes `root/results.json` (scores,
    V4 summary, skipped categories)."""
    categories = categories or (list(ids) if ids else OFFLINE)
    bad = [c for c in categories if c in NEEDS_NETWORK]
    if bad:
        raise ValueError(f"BFCL categories {bad} need the network ({NEEDS_NETWORK[bad[0]]}); valid offline ones: "
                         f"{', '.join(OFFLINE + OFFLINE_NOT_GOLD_CHECKED)}")  # fmt: skip
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    gen = ["generate", "--model", HANDLER, "--skip-server-setup", "--local-model-path", str(Path(checkpoint).resolve()),
           "--num-threads", str(num_threads), "--allow-overwrite"]  # fmt: skip
    if ids:
        (root / "test_case_ids_to_generate.json").write_text(json.dumps(ids))
        gen += ["--run-ids"]
    else:
        gen += ["--test-category", ",".join(categories)]
    env = {"REMOTE_OPENAI_BASE_URL": base_url, "HF_HUB_OFFLINE": "1"}
    if rehearsal:
        gen = [str(project / "rehearse.py"), *gen]
        env["ENVACE_REHEARSAL"] = json.dumps({**rehearsal, "log": str((root / "rehearsals.jsonl").resolve())})
    bfcl(gen, root, project, env=env)
    per_category = evaluate(root, categories, project=project, partial=bool(ids))
    result = {"handler": HANDLER, "checkpoint": str(checkpoint), "categories": categories, "scores": per_category,
              "v4": v4_summary(per_category), "partial": bool(ids), "rehearsal": rehearsal,
              "skipped_need_network": NEEDS_NETWORK}  # fmt: skip
    (root / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
