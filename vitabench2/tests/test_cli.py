"""The command line: subcommands with --help, one-line errors, API keys kept out of run_info.json, the history of
resumes, the settings check on resume, and `--tasks hf:...` loading before anything switches the hub offline."""

import json
import os
import subprocess
import sys

import pytest
from test_served import FakeServer, happy

from vitabench2 import cli
from vitabench2.tasks import load_tasks, sample_tasks_path


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-c", "from vitabench2.cli import entry_point; entry_point()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in ("run", "eval", "judge", "reproduce", "report", "view", "rag-cache"):
        assert name in out
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--retry-failed" in out and "official 300" in out and "--thinking" in out


def test_config_errors_are_one_line(tmp_path):
    proc = run_cli(
        "run", "--agent", "openai:m@http://127.0.0.1:9/v1", "--memory-type", "vector", "--output", str(tmp_path)
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Unknown memory type 'vector'" in proc.stderr
    proc = run_cli("run", "--tasks", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_redact_keeps_keys_out():
    argv = ["run", "--api-key", "sk-1", "--judge-api-key=sk-2", "--agent", "a"]
    assert cli.redact(argv) == ["run", "--api-key", "***", "--judge-api-key=***", "--agent", "a"]


def test_hf_tasks_load_online_then_run_history_and_settings_check(tmp_path, monkeypatch):
    seen = {}

    def fake_load_public(version, language, domain):
        seen["offline"] = os.environ.get("HF_HUB_OFFLINE")
        seen["args"] = (version, language, domain)
        return load_tasks(sample_tasks_path())

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("vitabench2.tasks.load_public", fake_load_public)
    server = FakeServer(happy)
    try:
        spec = f"openai:fake-model@{server.url}"
        out = tmp_path / "run"
        argv = ["run", "--tasks", "hf:2.0", "--agent", spec, "--api-key", "sk-secret", "--users", "U_SAMPLE_02",
                "--output", str(out)]  # fmt: skip
        cli.main(argv)
        assert seen == {"offline": None, "args": ("2.0", "english", "personalization")}
        cli.main(argv)  # resume: nothing left, but the invocation is recorded
        info = json.loads((out / "run_info.json").read_text())
        assert [h["outcome"] for h in info["history"]] == ["finished", "finished"]
        assert "sk-secret" not in (out / "run_info.json").read_text() and "***" in info["command"]
        config = json.loads((out / "config.json").read_text())
        assert config["context_length"] == 32768 and config["seed"] == 300  # asked from the endpoint
        for extra in (["--max-errors", "5"], ["--judge-retries", "1"], ["--max-tokens", "100"], ["--thinking", "on"]):
            with pytest.raises(ValueError, match="different settings"):
                cli.main(argv + extra)
    finally:
        server.close()


def test_eval_config_writes_results_json(tmp_path):
    """`vitabench2 eval --config NAME key=value` (the monorepo's shape, `make eval PAPER=vitabench2`): the config's
    `run` section becomes `vitabench2 run` flags, overrides win, the run lands in <output>/<config>_<method> and
    results.json holds the metrics, failures, cost and the resolved config."""
    from vitabench2.config import EvalConfig

    assert EvalConfig().run_args() == []  # the defaults are run's
    flags = EvalConfig(memory_kwargs={"top_k": 4}, users=["a", "b"], outcome_reward=True, trials=4).run_args()
    assert flags == ["--memory-kwargs", '{"top_k": 4}', "--trials", "4", "--users", "a,b", "--outcome-reward"]
    server = FakeServer(happy)
    try:
        config = tmp_path / "fake.yaml"
        config.write_text(f"run:\n  agent: openai:fake-model@{server.url}\n  memory_type: rewrite\n  trials: 2\n")
        cli.main(["eval", "users=[U_SAMPLE_02]", "--config", str(config), "--output", str(tmp_path), "trials=1"])
        out = tmp_path / "fake_eval"
        results = json.loads((out / "results.json").read_text())
        summary = json.loads((out / "summary.json").read_text())
        assert results["final"]["avg@1"] == summary["metrics"]["avg@1"] == 1.0
        assert results["final"]["num_units"] == 2 and results["memory"] == "rewrite" and results["commit"]
        assert results["config"]["run"]["trials"] == 1 and results["config"]["run"]["users"] == ["U_SAMPLE_02"]
        assert results["cost"]["total_agent_cost"] == 0.0 and results["backend_errors"] == 0
        assert "--trials" not in results["command"] and "--users U_SAMPLE_02" in results["command"]
    finally:
        server.close()
    proc = run_cli("eval", "--config", str(config), "memory_typ=rag")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "memory_type" in proc.stderr
    proc = run_cli("eval", "--config", "sample_cpu", "trials=0", "--output", str(tmp_path))
    assert proc.returncode == 2 and "trials must be >= 1" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("eval", "--config", "paper_rewrite")
    assert proc.returncode == 2 and "VITA_AGENT_MODEL" in proc.stderr
