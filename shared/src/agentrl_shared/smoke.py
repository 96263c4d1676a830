"""What every package's smoke and CLI tests check: every parameter moved, a one-process ZeRO-3 launch, a two-process
CPU launch, the flags a subcommand's `--help` lists, configuration errors in one line.

The smoke tests train two optimizer steps with a tiny model from `agentrl_shared.models` and compare the saved weights
with the initial ones; the ZeRO-3 variant runs in the test process under the environment `accelerate launch` would
set for one process.
"""

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

from .envs.base import Step


def changed_parameters(before_dir: Path, after_dir: Path) -> tuple[int, list[str]]:
    """`(number of tensors, names of the unchanged ones)` between two `model.safetensors` folders.

    The files are read directly: under a live ZeRO-3 config `from_pretrained` would partition the weights.
    """
    import torch
    from safetensors.torch import load_file

    before = load_file(Path(before_dir) / "model.safetensors")
    after = load_file(Path(after_dir) / "model.safetensors")
    if before.keys() != after.keys():
        raise AssertionError(f"different tensors: {sorted(before.keys() ^ after.keys())}")
    return len(before), [k for k in before if torch.equal(before[k], after[k])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def zero3_single_process():
    """Inside: the variables `accelerate launch` sets for one DeepSpeed process, on a free local port. On exit: the
    previous environment, and transformers' global DeepSpeed config cleared. A ZeRO-3 run leaves that config set for as
    long as its training arguments live, and every later `from_pretrained` in the process would then build the model
    under `deepspeed.zero.Init` (which needs `LOCAL_RANK`)."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "ACCELERATE_USE_DEEPSPEED": "true"}  # fmt: skip
    before = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        for key, value in before.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value


class ScriptedEnv:
    """The two-rank tests' environment: episodes end after 1 turn on rank 0 and after 1 + seed % 3 turns on rank 1
    (so the ranks collect different numbers of rows), and won depends on the sampled action, so group members get
    different rewards. Defined here, at module level, so that the pool can host it in worker processes (spawned: they
    unpickle it by name and read `RANK` from the environment they inherit)."""

    def __init__(self):
        self.rank = int(os.environ.get("RANK", "0"))

    def reset(self, task: dict, seed: int) -> Step:
        self.turn, self.length = 0, 1 if self.rank == 0 else 1 + seed % 3
        return Step(f"Room {task['task_id']}. Pick a door.", 0.0, False, self._info(False))

    def step(self, action: str) -> Step:
        self.turn += 1
        won = len(action) % 2 == 0 and self.turn == self.length
        return Step(f"Turn {self.turn}.", float(won), self.turn >= self.length, self._info(won))

    def _info(self, won: bool) -> dict:
        return {"won": won, "admissible_actions": ["go to door 1", "go to door 2"], "task_type": "scripted"}

    def close(self) -> None:
        pass


def scripted_env(name: str, **kwargs) -> ScriptedEnv:
    """`agentrl_shared.envs.make_env` for the two-rank tests: a `ScriptedEnv` whatever the name."""
    return ScriptedEnv()


def save_rank_outputs(trainer, out: Path) -> int:
    """What a two-rank test compares, written by each rank after `train`: how its pool served the run
    (`rank<r>_pool.json`: worker processes, the pool's placement decision, step calls its workers served, failures)
    and the full ZeRO-3 parameters gathered (`rank<r>_params.pt`; every rank must hold the same). Returns the rank."""
    import deepspeed
    import torch

    rank = trainer.accelerator.process_index
    pool = {
        "workers": len(trainer.pool._procs),
        "in_process": trainer.pool.step_cost["in_process"],
        "pooled_calls": trainer.pool.step_cost["pooled_calls"],
        "failures": trainer.pool.failures,
    }
    (out / f"rank{rank}_pool.json").write_text(json.dumps(pool))
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    params = list(model.named_parameters())
    with deepspeed.zero.GatheredParameters([p for _, p in params]):
        state = {name: p.detach().clone().cpu() for name, p in params}
    torch.save(state, out / f"rank{rank}_params.pt")
    return rank


def save_first_batches(trainer, batches: list[dict], out: Path) -> None:
    """Written from a two-rank test's `_rollout_micro_batches`: this rank's micro-batches of the first rollout, on CPU
    (`rank<r>_batches.pt`), whose loss the test's naive one-process reference recomputes."""
    import torch

    if trainer.rollouts_done == 1:
        saved = [{k: v.cpu() for k, v in b.items()} for b in batches]
        torch.save(saved, out / f"rank{trainer.accelerator.process_index}_batches.pt")


def launch_two_ranks(out: Path, script_args: list[str], timeout: int = 1200, deepspeed: bool = True) -> subprocess.CompletedProcess:  # fmt: skip
    """Run `script_args` on 2 CPU processes (gloo): `accelerate launch` under DeepSpeed ZeRO-3 (the shipped
    `ds_zero3.json`; the accelerate config is written into `out`), or torchrun for plain DDP (`deepspeed=False`,
    accelerate takes the ranks from the environment). A run that does not finish within `timeout` (e.g. one rank
    alone in a collective) fails the calling test."""
    import pytest

    out.mkdir(parents=True, exist_ok=True)
    if deepspeed:
        ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
        config = out / "accelerate.yaml"
        config.write_text(
            "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
            f"deepspeed_config:\n  deepspeed_config_file: {ds}\n  zero3_init_flag: true\n"
            f"num_machines: 1\nnum_processes: 2\nuse_cpu: true\nmain_process_port: {free_port()}\n"
        )
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), *script_args]
    else:  # accelerate's own launcher runs a MULTI_CPU config as one process; torchrun sets the ranks' variables
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), *script_args]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torch's elastic launcher starts each rank in a session of its own: kill the whole process tree, or the
        # ranks would outlive the test, holding their cores and memory (and the pipes `communicate` reads).
        import psutil

        tree = [proc, *psutil.Process(proc.pid).children(recursive=True)]
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                p.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"2-process run did not finish in {timeout}s:\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def check_lora_two_ranks(package: str, out: Path, overrides: list[str], timeout: int = 900,
                         adapters_move: bool = True) -> None:  # fmt: skip
    """`<package> train --config smoke model.lora.r=8` on 2 CPU processes under ZeRO-3 (`agentrl_shared.lora_check`
    records each rank's policy before and after training). Checks: the policy is a PEFT model, only adapter tensors
    (`lora_`) changed, every `lora_B` (zero at initialisation) moved (`adapters_move`: off where the smoke run's
    gradient is zero, so that nothing can move B), the base weights are bit-identical, and both ranks hold
    bit-identical parameters before and after."""
    import torch

    ds = files("agentrl_shared") / "accelerate" / "ds_zero3.json"
    args = ["-m", "agentrl_shared.lora_check", package, str(out), "model.lora.r=8", f"trainer.deepspeed={ds}",
            *overrides]  # fmt: skip
    proc = launch_two_ranks(out, args, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    before, after = ([torch.load(out / f"rank{r}_{tag}.pt") for r in range(2)] for tag in ("before", "after"))
    for states in (before, after):
        assert states[0].keys() == states[1].keys()
        differ = [k for k in states[0] if not torch.equal(states[0][k], states[1][k])]
        assert differ == [], f"the ranks disagree on {differ[:5]}"
    start, end = before[0], after[0]
    assert start.keys() == end.keys() and any(".base_layer." in k for k in start), sorted(start)[:5]
    changed = {k for k in start if not torch.equal(start[k], end[k])}
    base_changed = sorted(k for k in changed if "lora_" not in k)
    assert base_changed == [], f"base weights changed: {base_changed[:5]}"
    lora_b = {k for k in start if "lora_B" in k}
    assert lora_b and (lora_b <= changed or not adapters_move), (
        f"adapters that did not move: {sorted(lora_b - changed)[:5]}"
    )


def help_flags(main: Callable[[list[str]], None], command: str) -> set[str]:
    """The `--flags` that `<pkg> <command> --help` lists, `--help` itself left out."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([command, "--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise AssertionError(f"{command} --help exited with {exc.code!r}") from None
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out.getvalue())) - {"--help"}


def error_line(main: Callable[[list[str]], None], argv: list[str]) -> str:
    """The message a command that must fail on its configuration ends with (exit status 2); it has to be one line."""
    try:
        main(argv)
    except SystemExit as exc:
        if exc.code != 2 or "\n" in str(exc):
            raise AssertionError(f"expected a one-line message and exit 2, got exit {exc.code!r}: {exc}") from None
        return str(exc)
    raise AssertionError(f"{argv} did not fail")


def check_mechanisms_smoke(main: Callable[[list[str]], None], package: str, method: str, trainer_cls, load,
                           out: Path) -> tuple[dict, object, list, list]:  # fmt: skip
    """`<package> mechanisms` on the smoke config (a 1-task panel), the tiny model standing in for the trained
    checkpoints: the results file carries provenance, the panel and every model's fields; then, on a trainer of the
    same config, the per-row (student, teacher) log-probs of `mechanisms.row_logps` equal a naive forward of
    `cat(prompt, completion)` and `cat(teacher prompt, completion)` (log-softmax, gathered). Returns the payload,
    the trainer, its student episodes and their log-probs, for the package's own checks."""
    import json
    import shlex

    import torch

    from .cli import load_panel
    from .mechanisms import build_trainer, play_panel, row_labels, row_logps
    from .models import model_path

    tiny = Path(model_path("tiny-qwen3"))
    runs = out / "runs"
    for label in ("grpo", method):
        (runs / "cpu" / label / "seed0").mkdir(parents=True)
        (runs / "cpu" / label / "seed0" / "final").symlink_to(tiny)
    overrides = ["env.eval_episodes=1"]
    argv = ["mechanisms", "--config", "smoke", "--runs", str(runs), "--seed", "0", "--output", str(out / "mech"),
            *overrides]  # fmt: skip
    main(argv)
    payload = json.loads((out / "mech" / "mechanisms.json").read_text())
    assert payload["commit"] != "unknown" and payload["command"] == shlex.join([package, *argv])
    assert payload["panel"]["task_ids"] == ["textrooms/valid_seen/0"] and payload["panel"]["seeds"] == [1000]
    assert sorted(payload["models"]) == sorted(["untrained", "grpo", method])
    for entry in payload["models"].values():
        assert {"model", "fingerprint", "student", "teacher", "gap", "method"} <= set(entry)
        assert entry["student"]["summary"]["num_episodes"] == entry["teacher"]["summary"]["num_episodes"] == 1
        assert entry["gap"]["all"]["n"] > 0 and {"won", "failed", "turn1"} <= set(entry["gap"])

    cfg = load("smoke", [*overrides, f"trainer.output_dir={out / 'trainer'}"])
    trainer = build_trainer(trainer_cls, cfg)
    episodes, _ = play_panel(trainer, load_panel(cfg["env"])[0], [1000], 0.0)
    trainer.pool.close()
    rows, _, _ = row_labels(episodes)
    logps = row_logps(trainer, rows)
    model = trainer.model.eval()
    for row, (student, teacher) in zip(rows, logps, strict=True):
        for prompt, got in ((row.prompt_ids, student), (row.teacher_prompt_ids, teacher)):
            ids = torch.tensor([prompt + row.completion_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (C, V) predicting completion
            naive = torch.log_softmax(logits, -1).gather(-1, torch.tensor(row.completion_ids)[:, None])[:, 0]
            torch.testing.assert_close(got, naive, atol=1e-4, rtol=0)
    return payload, trainer, episodes, logps


# fp32 trainer and fp32 engine: measured mean |diff| ~2e-7, max ~1e-6 (tiny Qwen3, 2 CPU cores); a bf16 engine (vLLM's
# dtype="auto" for an fp32 checkpoint) is off by ~1e-2 on the same tokens (shared/tests/test_vllm_cpu.py)
VLLM_GAP_MEAN_TOL, VLLM_GAP_MAX_TOL = 1e-4, 1e-3


def vllm_cpu_overrides(model: str, temperature: float = 0.8, max_completion_length: int = 8) -> list[str]:
    """The overrides that run a package's smoke config on TRL's vLLM colocate path with vLLM's CPU build
    (`make test-vllm`): `model` in fp32 (vLLM's CPU attention needs head_dim >= 32), a sampling temperature below 1
    (both sides must scale the logits by it), no top-p/top-k truncation (the engine's "processed" log-probs would be
    those of the truncated distribution), and no importance-sampling correction (the gap is measured, not corrected)."""
    return [
        f"model.name_or_path={model}",
        "trainer.use_vllm=true",
        "trainer.vllm_mode=colocate",
        "trainer.vllm_importance_sampling_correction=false",
        "trainer.vllm_max_model_length=1024",
        f"trainer.temperature={temperature}",
        "trainer.top_p=1.0",
        "trainer.top_k=0",
        f"trainer.max_completion_length={max_completion_length}",
    ]


def rollout_gaps(results: dict) -> list[dict]:
    """The per-rollout log-history entries of a multi-turn trainer's `results.json` (those carrying
    `sampling/logp_gap_*`, the engine-vs-trainer log-prob gap of the rollout's tokens)."""
    return [h for h in results["log_history"] if "rollout/rows" in h]


def check_vllm_smoke(main: Callable[[list[str]], None], out: Path, model: str, max_completion_length: int = 8,
                     max_model_len: int = 1024) -> list[dict]:  # fmt: skip
    """`<pkg> train --config smoke` of a multi-turn trainer on TRL's vLLM colocate path (`vllm_cpu_overrides`): it
    trains its 2 rollouts, and after each weight sync the engine's log-probs of its sampled tokens equal the
    trainer's (`sampling/logp_gap_*` within `VLLM_GAP_*_TOL`). Returns the rollouts' log-history entries."""
    import json

    overrides = [*vllm_cpu_overrides(model, max_completion_length=max_completion_length),
                 f"trainer.vllm_max_model_length={max_model_len}"]  # fmt: skip
    main(["train", "--config", "smoke", f"trainer.output_dir={out}", *overrides])
    results = json.loads((out / "results.json").read_text())
    rollouts = rollout_gaps(results)
    assert results["rollouts"] == 2 and len(rollouts) == 2, results["log_history"]
    for i, h in enumerate(rollouts):
        print(f"\nrollout {i + 1}: mean |logp_vllm - logp_trainer| {h['sampling/logp_gap_mean']:.2e}, max "
              f"{h['sampling/logp_gap_max']:.2e}, mismatch KL (k3) {h['sampling/mismatch_kl_k3']:.2e}")  # fmt: skip
        assert h["sampling/logp_gap_mean"] < VLLM_GAP_MEAN_TOL and h["sampling/logp_gap_max"] < VLLM_GAP_MAX_TOL, h
    return rollouts


__all__ = [
    "check_mechanisms_smoke",
    "VLLM_GAP_MAX_TOL",
    "VLLM_GAP_MEAN_TOL",
    "changed_parameters",
    "check_vllm_smoke",
    "error_line",
    "free_port",
    "help_flags",
    "launch_two_ranks",
    "rollout_gaps",
    "vllm_cpu_overrides",
    "zero3_single_process",
]
