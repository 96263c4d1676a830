"""Paper-scale launch: the vLLM extra is synced, a machine without GPUs is refused at once, configs carry their
process count, `reproduce --dry-run` prints each launch on the paper's process count and runs nothing, an unfinished
run resumes from its last checkpoint, `train --method` applies the method's switches and refuses a typo, training
length counts rollouts, and the GPU check stops without CUDA."""

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import agentrl_shared.cli
from agentrl_shared.smoke import error_line
from sdar.cli import PAPER_CONFIGS, load, main


ROOT = Path(__file__).resolve().parents[2]
needs_make = pytest.mark.skipif(shutil.which("make") is None or not (ROOT / "Makefile").exists(), reason="no make")


@needs_make
def test_make_reproduce_paper_syncs_with_vllm_and_never_without():
    dry = subprocess.run(["make", "-n", "reproduce", "PAPER=sdar", "SCALE=paper"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    syncs = [line for line in dry.splitlines() if " sync --locked" in line]
    assert syncs and all("--extra vllm" in line for line in syncs)
    runs = [line for line in dry.splitlines() if " run --locked" in line]
    assert runs and all("--extra vllm" in line for line in runs)


@needs_make
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has NVIDIA GPUs")
def test_make_reproduce_paper_stops_at_once_without_gpus():
    proc = subprocess.run(["make", "reproduce", "PAPER=sdar", "SCALE=paper"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode != 0 and "SCALE=paper needs NVIDIA GPUs" in proc.stdout + proc.stderr
    assert " sync " not in proc.stdout  # stopped before syncing anything


@needs_make
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["PAPER=vitabench2", "SCALE=paper"], "PAPER=vitabench2 does not take SCALE"),
        (["PAPER=vad", "METHODS=grpo"], "PAPER=vad does not take METHODS (it takes: SCALE SEEDS DRY_RUN)"),
        (["PAPER=envace", "CONFIGS=x"], "does not take CONFIGS"),
    ],
)
def test_make_reproduce_refuses_a_variable_the_paper_does_not_take(args, words):
    proc = subprocess.run(["make", "reproduce", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and words in proc.stdout and " sync " not in proc.stdout


@needs_make
def test_make_reproduce_passes_methods_and_configs_on():
    dry = subprocess.run(["make", "-n", "reproduce", "PAPER=agentopsd", "METHODS=grpo,rlsd", "CONFIGS=a,b"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "agentopsd reproduce --scale cpu --seeds 0 --methods grpo,rlsd --configs a,b" in dry


def test_paper_configs_carry_their_gpu_count_and_the_paper_global_batch(monkeypatch):
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA", "SEARCH_QA_DATA"):
        monkeypatch.setenv(var, "/data")
    expected = {"alfworld": (8, 128, 256), "webshop": (2, 128, 64), "search_qa": (4, 1024, 256)}
    for name in PAPER_CONFIGS:
        cfg = load(name, ["trainer.use_cpu=true"])
        t, n = cfg["trainer"], cfg["launch"].num_processes
        episodes = t.per_device_train_batch_size * t.steps_per_generation * n
        mini_batch = n * t.gradient_accumulation_steps * t.micro_batch_rows
        assert (n, episodes, mini_batch) == expected[cfg["env"].name], name
        assert t.num_rollouts == 150


def test_make_reproduce_dry_run_neither_checks_gpus_nor_syncs():
    if shutil.which("make") is None or not (ROOT / "Makefile").exists():
        pytest.skip("no make")
    dry = subprocess.run(["make", "-n", "reproduce", "PAPER=sdar", "SCALE=paper", "DRY_RUN=1"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "nvidia-smi" not in dry and " sync " not in dry
    (run,) = [line for line in dry.splitlines() if "sdar reproduce" in line]
    assert "--scale paper" in run and run.endswith("--dry-run") and "--no-sync" in run


def nothing_runs(monkeypatch) -> None:
    """A dry run may not launch, check GPUs, vLLM or data, nor need a data location."""

    def fail(*args, **kwargs):
        raise AssertionError(f"a dry run ran {args}")

    monkeypatch.setattr(subprocess, "run", fail)
    monkeypatch.setattr(agentrl_shared.cli, "check_paper_prerequisites", fail)
    for var in ("ALFWORLD_DATA", "WEBSHOP_DATA", "SEARCH_QA_DATA"):
        monkeypatch.delenv(var, raising=False)


def dry_run_launches(out: str) -> dict[tuple[str, str], list[str]]:
    """`(config, method)` -> the printed `accelerate launch` command, split."""
    commands = [shlex.split(line) for line in out.splitlines() if line.startswith("accelerate launch ")]
    return {(c[c.index("--config") + 1], c[c.index("--method") + 1]): c for c in commands}


def test_reproduce_paper_dry_run_prints_every_launch_on_the_papers_process_count(tmp_path, monkeypatch, capsys):
    nothing_runs(monkeypatch)
    main(["reproduce", "--scale", "paper", "--dry-run", "--output", str(tmp_path)])
    launches = dry_run_launches(capsys.readouterr().out)
    gpus = {"alfworld_qwen2.5-3b_paper": 8, "webshop_qwen2.5-3b_paper": 2, "search_qwen2.5-3b_paper": 4}
    assert sorted(launches) == sorted((c, m) for c in gpus for m in ("grpo", "sdar"))
    for (config, method), cmd in launches.items():
        at = cmd.index("--num_processes")
        assert cmd[at : at + 4] == ["--num_processes", str(gpus[config]), "--num_machines", "1"], config
        assert cmd[cmd.index("-m") : cmd.index("-m") + 3] == ["-m", "sdar.cli", "train"]
        assert f"trainer.output_dir={tmp_path / 'paper' / method / f'seed0_{config}'}" in cmd
    assert not (tmp_path / "paper").exists()  # nothing written


def test_reproduce_resumes_an_unfinished_run_from_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    nothing_runs(monkeypatch)
    unfinished = tmp_path / "paper" / "sdar" / "seed0_alfworld_qwen2.5-3b_paper"
    for step in (5, 40, 10):
        (unfinished / f"checkpoint-{step}").mkdir(parents=True)
    finished = tmp_path / "paper" / "grpo" / "seed0_webshop_qwen2.5-3b_paper"
    (finished / "checkpoint-40").mkdir(parents=True)
    (finished / "results.json").write_text("{}")
    main(["reproduce", "--scale", "paper", "--dry-run", "--output", str(tmp_path)])
    launches = dry_run_launches(capsys.readouterr().out)
    assert ("webshop_qwen2.5-3b_paper", "grpo") not in launches  # finished: not redone
    assert launches["alfworld_qwen2.5-3b_paper", "sdar"][-1] == (
        f"trainer.resume_from_checkpoint={unfinished / 'checkpoint-40'}"
    )
    assert not any(arg.startswith("trainer.resume") for arg in launches["alfworld_qwen2.5-3b_paper", "grpo"])


def test_train_method_applies_its_switches_and_refuses_a_typo(monkeypatch):
    import sdar.cli

    trained = []
    monkeypatch.setattr(sdar.cli, "train", lambda cfg, method, output: trained.append((method, cfg["trainer"])))
    main(["train", "--config", "smoke", "--method", "grpo"])
    main(["train", "--config", "smoke"])  # `run`: the config as it is
    (grpo, t_grpo), (run, t_run) = trained
    assert (grpo, t_grpo.sdar_coef, run, t_run.sdar_coef) == (
        "grpo",
        0.0,
        "run",
        load("smoke", [])["trainer"].sdar_coef,
    )
    message = error_line(main, ["train", "--config", "smoke", "--method", "gpro"])
    assert (
        message == "sdar: Unknown --method 'gpro'. Did you mean grpo? Valid: run (the config as it is), grpo, "
        "grpo_opsd, sdar, opsd."
    )
    assert len(trained) == 2  # refused before any config or model loads


def test_max_steps_is_refused_in_favour_of_num_rollouts():
    from agentrl_shared.config import ConfigError

    with pytest.raises(ConfigError, match="num_rollouts"):
        load("smoke", ["trainer.max_steps=10"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_check_stops_without_cuda():
    from sdar.gpu_check import main

    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        main([])
