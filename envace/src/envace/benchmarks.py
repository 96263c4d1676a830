"""`envace eval --benchmark bfcl|finmcp|vitabench|tau2`: the paper's evaluation benchmarks against one checkpoint served
behind an OpenAI-compatible endpoint (EnvACE project page, main table: BFCL-v4, tau2-bench, VitaBench; README:
FinMCP-Bench Tool-F1).

With `--endpoint URL` (e.g. a `vllm serve` on a GPU node, see `agentrl_shared.serve.vllm_command`) the benchmark
talks to that server, whose model id is `--served-model`; without it, `model.name_or_path` is served in process on
CPU (`agentrl_shared.serve`) for the duration of the run. Each benchmark writes its own files under
`<--output>/benchmarks` and a `results.json` with the command, commit and scores
(`agentrl_shared.evaluation.write_results`). tau2's user simulator and VitaBench's user simulator and judge are LLMs
behind their own OpenAI-compatible endpoints (`--user-endpoint`/`--user-model`, `--judge-endpoint`/`--judge-model`;
keys from `USER_API_KEY` / `JUDGE_API_KEY`): they are required, because a policy under test that also plays the user
(or grades itself) gives numbers no published table can be compared with; `--user-is-policy` asks for that anyway
(the policy's endpoint for every role; its results say so).

`--rehearsal N,...` (tau2, BFCL; the paper's test-time scaling table): each budget N is one run with test-time
private rehearsal (`tts_chat.PrivateRehearsal`, `--rehearsal-mode parallel|sequential`, the N rehearsals sampled at
T 0.6 / top-p 0.95; N = 0: the committed execution alone); `rehearsal_budget.md` gets the budget-vs-score table
(`report.rehearsal_table`: tau2 pass^1 and average reward, BFCL V4 multi-turn mean and offline overall).
"""

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path

from .tts_chat import MAX_STEPS, MODES, TEMPERATURE, TOP_P, PrivateRehearsal, raw_text


BENCHMARKS = ("bfcl", "finmcp", "vitabench", "tau2")
REHEARSAL_BENCHMARKS = ("tau2", "bfcl")  # the paper's test-time scaling table: tau2-Bench, BFCL multi-turn
USER_API_KEY_ENV = "USER_API_KEY"


def other_roles(name: str, user_url: str | None, user_model: str | None, judge_url: str | None,
                judge_model: str | None, user_is_policy: bool) -> None:  # fmt: skip
    """Refuse (one line) a tau2 / VitaBench run whose user simulator (VitaBench: and judge) would be the policy under
    test, unless `--user-is-policy` asks for it."""
    needed = {"tau2": [("--user-endpoint", user_url), ("--user-model", user_model)],
              "vitabench": [("--user-endpoint", user_url), ("--user-model", user_model),
                            ("--judge-endpoint", judge_url), ("--judge-model", judge_model)]}.get(name, [])  # fmt: skip
    missing = [flag for flag, value in needed if not value]
    if missing and not user_is_policy:
        raise SystemExit(
            f"envace: --benchmark {name} needs {', '.join(missing)} (a user simulator"
            f"{' and a judge' if name == 'vitabench' else ''} other than the policy under test, so that the scores "
            "compare with published ones); --user-is-policy uses the policy's endpoint for them instead"
        )


@contextlib.contextmanager
def endpoint(model: str, url: str | None, served_model: str | None, max_new_tokens: int | None):
    """(base URL, model id): the given server, or an in-process one over `model` (CPU)."""
    if url:
        yield url, served_model or model
        return
    from agentrl_shared.serve import ChatModel, OpenAIServer

    with OpenAIServer(ChatModel(model, max_new_tokens=max_new_tokens), "policy") as server:
        yield server.url, "policy"


def run_benchmark(name: str, model: str, out: Path, url: str | None = None, served_model: str | None = None,
                  data: str | None = None, extra: list[str] | None = None, max_new_tokens: int | None = None,
                  user_url: str | None = None, user_model: str | None = None, num_tasks: int | None = None,
                  max_steps: int = 200, judge_url: str | None = None, judge_model: str | None = None,
                  user_is_policy: bool = False, rehearsal: list[int] | None = None,
                  rehearsal_mode: str = "parallel") -> dict:  # fmt: skip
    """Run one benchmark; returns and writes the results payload. `user_url`/`user_model` (tau2, VitaBench),
    `judge_url`/`judge_model` (VitaBench): the other roles' endpoints, required unless `user_is_policy`;
    `num_tasks` (first N tasks per domain) and `max_steps` (tau2's message cap) are tau2's. `rehearsal` (tau2,
    BFCL): test-time private rehearsal budgets N (0 = none), each run in its own folder
    (`<benchmark>/rehearsal_<mode>_N<N>`), with `rehearsal_mode` (`tts_chat.PrivateRehearsal`); the payload's
    `rehearsal.budgets` holds each budget's scores and `rehearsal_budget.md` the budget-vs-score table."""
    from agentrl_shared.evaluation import write_results
    from agentrl_shared.models import model_path

    if name not in BENCHMARKS:
        raise SystemExit(f"envace: unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    other_roles(name, user_url, user_model, judge_url, judge_model, user_is_policy)
    if rehearsal and name not in REHEARSAL_BENCHMARKS:
        raise SystemExit(f"envace: --rehearsal applies to --benchmark {' and '.join(REHEARSAL_BENCHMARKS)} (the "
                         "generated-task panel: --tts)")  # fmt: skip
    if rehearsal_mode not in MODES or any(n < 0 for n in rehearsal or []):
        raise SystemExit(f"envace: --rehearsal takes budgets N >= 0 and --rehearsal-mode one of {', '.join(MODES)}")
    out = Path(out)
    payload = {"benchmark": name, "model": model, "endpoint": url or "in-process (agentrl_shared.serve)",
               "command": shlex.join(["envace", *sys.argv[1:]]), "user_is_policy": user_is_policy}  # fmt: skip
    sampling = {"temperature": TEMPERATURE, "top_p": TOP_P}  # the N rehearsals (tts_chat: official val_kwargs)
    with endpoint(model, url, served_model, max_new_tokens) as (base_url, model_id):
        if name == "bfcl":
            from .bfcl import run_bfcl

            ids = json.loads(Path(data).read_text()) if data and data.endswith(".json") else None  # a slice
            categories = None if ids else [c for c in (data or "").split(",") if c] or None
            keys = ("scores", "v4", "partial", "skipped_need_network")
            if rehearsal:
                budgets = {}
                for n in rehearsal:
                    settings = {**sampling, "budget": n, "mode": rehearsal_mode, "max_steps": MAX_STEPS,
                                "max_tokens": max_new_tokens or 4096} if n else None  # fmt: skip
                    result = run_bfcl(base_url, model_path(model), out / "bfcl" / f"rehearsal_{rehearsal_mode}_N{n}",
                                      categories, ids, rehearsal=settings)  # fmt: skip
                    budgets[str(n)] = {k: result[k] for k in keys}
                payload |= {"skipped_need_network": result["skipped_need_network"], "rehearsal": {
                    "mode": rehearsal_mode, **sampling, "budgets": budgets}}  # fmt: skip
            else:
                result = run_bfcl(base_url, model_path(model), out / "bfcl", categories, ids)
                payload |= {k: result[k] for k in keys}
        elif name == "finmcp":
            from .finmcp import derived_schemas, load_finmcp, openai_chat, run

            if not data:
                raise SystemExit("envace: --benchmark finmcp needs --data (a FinMCP-Bench file or Benchmark/ folder)")
            samples = load_finmcp(data)
            tools = derived_schemas(samples)
            payload |= {"data": data, "tools": "derived from the ground-truth calls", "scores": run(
                samples, openai_chat(base_url, model_id, max_tokens=max_new_tokens or 4096), tools, out / "finmcp")}  # fmt: skip
        elif name == "tau2":
            from .finmcp import openai_chat
            from .tau2_bench import BENCHMARK_DOMAINS, DOMAINS, run_tau2, user_simulator

            domains = [d for d in (data or "").split(",") if d] or list(BENCHMARK_DOMAINS)
            if unknown := [d for d in domains if d not in DOMAINS]:
                raise SystemExit(f"envace: unknown tau2 domain(s) {unknown}; valid: {', '.join(DOMAINS)} (--data)")
            user_llm, user_args = user_simulator(user_url or base_url, user_model or model_id,
                                                 os.environ.get(USER_API_KEY_ENV) or "EMPTY")  # fmt: skip
            payload |= {"domains": domains, "num_tasks": num_tasks, "max_steps": max_steps, "user_llm": user_llm,
                        "user_endpoint": user_args["api_base"]}  # fmt: skip
            committed = openai_chat(base_url, model_id, max_tokens=max_new_tokens or 4096)

            def tau2(chat, folder: Path) -> dict:
                return run_tau2(chat, user_llm, user_args, folder, domains, num_tasks, max_steps)

            if rehearsal:
                sample = openai_chat(base_url, model_id, max_tokens=max_new_tokens or 4096, **sampling)
                budgets = {}
                for n in rehearsal:
                    folder = out / "tau2" / f"rehearsal_{rehearsal_mode}_N{n}"
                    chat = PrivateRehearsal(lambda m, t: raw_text(sample(m, t)), n, rehearsal_mode,
                                            log=folder / "rehearsals.jsonl").wrap(committed) if n else committed  # fmt: skip
                    budgets[str(n)] = {"scores": tau2(chat, folder)}
                payload["rehearsal"] = {"mode": rehearsal_mode, **sampling, "budgets": budgets}
            else:
                payload["scores"] = tau2(committed, out / "tau2")
        else:
            from .vitabench import run_vitabench

            user = f"openai:{user_model}@{user_url}" if user_url else None  # None: the agent's endpoint
            judge = f"openai:{judge_model}@{judge_url}" if judge_url else None
            result = run_vitabench(base_url, model_id, out / "vitabench", tasks=data, user=user, judge=judge,
                                   extra=extra)  # fmt: skip
            payload |= {"harness_command": shlex.join(result["command"]), "summary": result["summary"]}
    write_results(out / "results.json", payload)
    print(json.dumps({k: v for k, v in payload.items() if k in ("benchmark", "scores")}, indent=1)[:4000])
    if rehearsal:
        from .report import rehearsal_table

        table = rehearsal_table([json.loads((out / "results.json").read_text())])  # with the commit
        (out / "rehearsal_budget.md").write_text(table + "\n")
        print(table)
    return payload
