"""Every user error of the front door ends the command with exit status 2 and one short line on stderr that names the
problem and its fix, before any model loads (the shared config loader, run loop and CLI, through `sdar`)."""

import pytest

from sdar.cli import main


BAD_YAML = "trainer:\n  learning_rate: [1\n"

# (command line, words the line must contain)
CASES = [
    (["train", "learning_rate=abc"], "trainer.learning_rate='abc' is not a number"),
    (["train", "bf16=maybe"], "trainer.bf16='maybe' is not true or false"),
    (["train", "model.dtype=float33"], "one of 'float32', 'bfloat16'"),
    (["train", "env.max_turns=2.5"], "env.max_turns=2.5 is not an integer"),
    (["train", "num_generations=0"], "trainer.num_generations=0 must be at least 2"),
    (["train", "trainer.num_rollouts=0"], "must be at least 1"),
    (["train", "env.eval_seeds=3"], "env.eval_seeds=3 is not a list"),
    (["train", "env.eval_episodes=0"], "env.eval_episodes=0 must be at least 1"),
    (["train", "env.eval_seeds=0,1"], "is not a list, e.g. [0, 1]"),
    (["train", "lerning_rate=1e-6"], "Did you mean learning_rate"),
    (["train", "trainer.lerning_rate=1e-6"], "Did you mean learning_rate"),
    (["train", "trainr.seed=1"], "Unknown section 'trainr'"),
    (["train", "learning_rate"], "not of the form key=value"),
    (["train", "--config", "smoek"], "did you mean smoke"),
    (["train", "--config", "{bad_yaml}"], "is not valid YAML at line 3"),
    (["eval", "model.name_or_path=/nonexistent/ckpt"], "Model folder '/nonexistent/ckpt' does not exist"),
    (["train", "env.name=alfworld", "env.task_kwargs={{data_dir: {tmp}/none}}"], "make data ENV=alfworld"),
    (["train", "trainer.skills_dir=official", "env.name=alfworld"], "make data ENV=skills"),
    (["train", "--config", "alfworld_qwen2.5-3b_paper"], "ALFWORLD_DATA"),
    (["reproduce", "--seeds", "0;1"], "--seeds '0;1' is not a comma-separated list"),
    (["reproduce", "--methods", "grpo,sdr"], "Unknown method(s) ['sdr']; valid: grpo, grpo_opsd, sdar, opsd"),
]


@pytest.mark.parametrize(("argv", "words"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_input_is_one_line_naming_the_fix(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("SKILLS_DATA", str(tmp_path / "no_skills"))
    (tmp_path / "bad.yaml").write_text(BAD_YAML)
    argv = [a.format(bad_yaml=tmp_path / "bad.yaml", tmp=tmp_path) for a in argv]
    if argv[0] in ("train", "eval") and "--config" not in argv:
        argv[1:1] = ["--config", "smoke"]
    if argv[0] in ("train", "eval"):
        argv += [f"trainer.output_dir={tmp_path / 'run'}"]
    else:
        argv += ["--output", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert len(err) == 1 and err[0].startswith("sdar: ") and words in err[0], err
    assert len(err[0].replace(str(tmp_path), "<tmp>")) <= 200, err[0]
    assert not (tmp_path / "run" / "final").exists()  # nothing trained


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "--config", "smoke", "trainer.learning_rate=abc"], "trainer.learning_rate='abc' is not a number"),
        (["train", "--config", "smoke", "lerning_rate=1e-6"], "Did you mean learning_rate"),
        (["eval", "--config", "alfworld_qwen2.5-3b_paper"], "ALFWORLD_DATA"),
    ],
)
def test_a_config_error_comes_before_torch_is_imported(argv, words):
    """The `sdar` command checks the config against `configs/fields.json` first: the error line, exit 2, and neither
    torch nor TRL's trainer imported (a fresh interpreter: this test process has imported them)."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom sdar.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print(e.code, 'torch' in sys.modules, 'trl.trainer.grpo_config' in sys.modules)")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.split() == ["2", "False", "False"], (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("sdar: ") and words in line
