"""The ratios of `make bench`, side by side, read back from `bench-results.json` (the last target of `make bench`).

`python -m agentrl_shared.bench_summary [--results bench-results.json]` prints one line per figure with its goal (issue
29: step time <= 1.25 x GRPO; pool >= 1.0 x one process for environments cheaper than a round trip, >= 1.8 on 2 cores
for ALFWorld; shared-prefix forwards > 1 x the plain ones), the configuration it was measured on and the commit of the
run that wrote it; after the pool's figures, the machine's own ceiling for them (CPU-bound loops in as many processes
as the pool's workers, against one after another). It measures nothing; a figure that no run wrote is printed as "not
run".
"""

import argparse
import json
from pathlib import Path


def rows(results: dict) -> list[tuple[str, float | None, str, str]]:
    """(figure, value, goal, provenance) for every ratio `make bench` files."""
    out = []
    for paper, name in (("sdar", "SDAR"), ("agentopsd", "AgentOPSD")):
        value = results.get(f"{paper}/step_time_ratio_{paper}_over_grpo")
        provenance = results.get(f"{paper}/provenance/step_time", {})  # sdar.bench; agentopsd keeps one commit
        config = provenance.get("config") or results.get(f"{paper}/config", {}).get("step_time", "")
        commit = provenance.get("commit") or results.get(f"{paper}/commit", "")
        out.append((f"{name} / GRPO step time", value, "<= 1.25", f"{config}; {commit}"))
    teacher = results.get("sdar/teacher_forward", {})
    provenance = results.get("sdar/provenance/teacher_forward", {})
    for shape in ("cpu", "paper"):
        f = teacher.get(shape, {})
        value = f.get("teacher_plain_over_shared_wall")
        detail = f"{f.get('rows', '?')} rows, max |logp diff| {f.get('max_abs_logp_diff', float('nan')):.1e}"
        out.append((f"teacher forward plain / shared prefix ({shape})", value, "> 1",
                    f"{detail}; {provenance.get('commit', '')} {provenance.get('note', '')}".strip()))  # fmt: skip
        if "teacher_plain_over_shared_chunks_wall" in f:  # the trainer's no-grad chunks (`log_prob_micro_batch_rows`)
            rows_ = f["log_prob_micro_batch_rows"]
            out.append((f"teacher plain / shared prefix, {rows_}-row chunks ({shape})",
                        f["teacher_plain_over_shared_chunks_wall"], "> 1",
                        f"against {f['micro_batch_rows']}-row micro-batches; {provenance.get('commit', '')}"))  # fmt: skip
        if "teacher_in_order_over_length_ordered_chunks_wall" in f:  # the chunks' rows ordered by prompt length
            out.append((f"teacher chunks in rollout order / by length ({shape})",
                        f["teacher_in_order_over_length_ordered_chunks_wall"], "> 1",
                        f"{f['log_prob_micro_batch_rows']}-row chunks; {provenance.get('commit', '')}"))  # fmt: skip
    f, provenance = results.get("sdar/loss_forward", {}), results.get("sdar/provenance/loss_forward", {})
    detail = (f"{f.get('rows', '?')} rows, max |logp diff| {f.get('max_abs_logp_diff', float('nan')):.1e}, "
              f"max |grad diff| {f.get('max_abs_grad_diff', float('nan')):.1e}")  # fmt: skip
    out.append(("loss forward + backward plain / shared prefix (cpu)", f.get("plain_over_shared_wall"), "> 1",
                f"{detail}; {provenance.get('commit', '')} {provenance.get('note', '')}".strip()))  # fmt: skip
    if "in_order_over_ordered_wall" in f:  # the trainer's micro-batches: a step's rows ordered by prompt length
        out.append(("loss fwd + bwd, rollout order / by length (cpu)", f["in_order_over_ordered_wall"], "> 1",
                    f"max |grad diff| {f['max_abs_grad_diff_in_order']:.1e}; {provenance.get('commit', '')}"))  # fmt: skip
    for key in sorted(k for k in results if k.startswith("envs/") and k.endswith("/pool_over_single")):
        name = key.split("/")[1]
        cost = results.get(f"envs/{name}/pool_step_cost", {})
        where = {True: "moved in-process", False: "in workers"}.get(cost.get("in_process"), "")
        where += ", threads" if cost.get("threaded") else ""
        goal = ">= 1.8 (2 cores)" if name == "alfworld" else (">= 1.0" if cost.get("in_process") else "")
        load = results.get("envs/load_average_1min", "")
        blocks = results.get(f"envs/{name}/pool_over_single_blocks")  # one ratio per ABBA block: the noise
        spread = f"; blocks {min(blocks):.2f}-{max(blocks):.2f}" if blocks else ""
        commit = f"; {results[f'envs/{name}/commit']}" if f"envs/{name}/commit" in results else ""
        placement = results.get(f"envs/{name}/slots_workers")  # [slots, worker processes]
        shown = f" ({placement[0]} slots, {placement[1]} workers)" if placement else ""
        out.append((f"pool / single, {name}{shown}", results[key], goal, f"{where}{spread}; load {load}{commit}"))
    if "envs/parallel_ceiling" in results:  # what the machine gives that many CPU-bound processes: the pool's limit
        c = results["envs/parallel_ceiling"]
        out.append((f"machine: {c['workers']} CPU-bound processes / one", c["ratio"], "(the pool's ceiling)",
                    f"repeats {min(c['repeats']):.2f}-{max(c['repeats']):.2f}; {c['commit']}"))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="bench-results.json")
    args = parser.parse_args(argv)
    path = Path(args.results)
    results = json.loads(path.read_text()) if path.is_file() else {}
    print(f"\n{'make bench, side by side (' + str(path) + ')':56s} {'ratio':>8s}  {'goal':18s} measured on")
    for figure, value, goal, where in rows(results):
        shown = "not run" if value is None else f"{value:.2f}"
        print(f"  {figure:54s} {shown:>8s}  {goal:18s} {where}")


if __name__ == "__main__":
    main()
