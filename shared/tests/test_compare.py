"""`agentrl_shared.compare`: entry parsing, the same-setting check, the table and plot from finished runs, and their
filing (`report.file_compares`, `report.compare_blocks`)."""

import json

import pytest

from agentrl_shared.compare import main, parse_entry
from agentrl_shared.config import ConfigError
from agentrl_shared.report import compare_blocks, file_compares


def payload(seed: int, success: float, env: dict | None = None, method: str = "grpo") -> dict:
    return {
        "method": method, "seed": seed, "commit": "abc1234", "model": "smollm2-135m", "eval_seeds": [1000],
        "panel_identity": "p64",
        "config": {"env": env or {"name": "textrooms", "eval_episodes": 64}},
        "final": {"success_rate_mean": success}, "curve": [{"rollouts": 0, "success_rate_mean": 0.3},
                                                           {"rollouts": 4, "success_rate_mean": success}],
    }  # fmt: skip


def write(runs, label, seed, data):
    d = runs / label / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(data))


def test_parse_entry():
    assert parse_entry("GRPO=agentopsd:cpu_cfg:grpo") == ("GRPO", "agentopsd", "cpu_cfg", "grpo", [])
    assert parse_entry("SDAR=sdar:cpu_cfg") == ("SDAR", "sdar", "cpu_cfg", "sdar", [])
    assert parse_entry("SDAR coef 1=sdar:cpu:sdar:trainer.sdar_coef=1.0:trainer.gate_beta=0") == (
        "SDAR coef 1",
        "sdar",
        "cpu",
        "sdar",
        ["trainer.sdar_coef=1.0", "trainer.gate_beta=0"],
    )
    for bad in ("SDAR", "SDAR=sdar", "SDAR=sdar:cpu:sdar:sdar_coef"):
        with pytest.raises(SystemExit, match="expected LABEL=PACKAGE:CONFIG"):
            parse_entry(bad)


def test_table_and_plot_from_finished_runs_mean_std(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    for seed, (a, b) in enumerate([(0.5, 0.6), (0.7, 0.6)]):
        write(runs, "GRPO", seed, payload(seed, a))
        write(runs, "SDAR", seed, payload(seed, b))
    # finished runs are not redone: no training command is launched here
    main(["GRPO=agentopsd:x:grpo", "SDAR=sdar:x", "--env", "textrooms", "--seeds", "0,1", "--out", str(out),
          "--runs", str(runs)])  # fmt: skip
    text = (out / "compare.md").read_text()
    assert "| textrooms | smollm2-135m | GRPO | 60.0 +- 14.1 (2 seeds) | 0, 1 | abc1234 |" in text
    assert "| textrooms | smollm2-135m | SDAR | 60.0 +- 0.0 (2 seeds) | 0, 1 | abc1234 |" in text
    assert (out / "learning_curves.png").stat().st_size > 0
    assert set(json.loads((out / "compare.json").read_text())) == {"GRPO", "SDAR"}


def test_a_reference_level_is_a_line_under_the_table_and_must_share_the_plan_s_model_and_panel(tmp_path):
    runs, out, untrained = tmp_path / "runs", tmp_path / "out", tmp_path / "results" / "untrained"
    write(runs, "GRPO", 0, payload(0, 0.5))
    for seed in (0, 1):
        write(untrained.parent, "untrained", seed, payload(seed, 0.25, method="untrained") | {"commit": "def5678"})
    argv = ["GRPO=agentopsd:x:grpo", "--env", "textrooms", "--out", str(out), "--runs", str(runs)]
    main([*argv, "--level", f"Untrained={untrained}"])
    text = (out / "compare.md").read_text()
    assert (
        f"Reference, not trained by this plan: Untrained 25.0 +- 0.0 (2 seeds) % ({untrained}, commit def5678)."
        in text
    )
    assert (out / "learning_curves.png").stat().st_size > 0
    write(untrained.parent, "other_panel", 0, payload(0, 0.25) | {"panel_identity": "p32"})
    with pytest.raises(SystemExit, match="--level Other: .* seed 0 evaluated another model or panel"):
        main([*argv, "--level", f"Other={untrained.parent / 'other_panel'}"])
    with pytest.raises(SystemExit, match="expected LABEL=DIR with finished runs"):
        main([*argv, "--level", f"Empty={tmp_path / 'nothing'}"])


def test_runs_on_different_panels_are_refused(tmp_path):
    runs = tmp_path / "runs"
    write(runs, "GRPO", 0, payload(0, 0.5))
    write(runs, "SDAR", 0, payload(0, 0.5, env={"name": "textrooms", "eval_episodes": 32}))
    with pytest.raises(SystemExit, match="do not share one model, environment, panel, training budget and precision"):
        main(["GRPO=agentopsd:x", "SDAR=sdar:x", "--env", "textrooms", "--out", str(tmp_path / "o"),
              "--runs", str(runs)])  # fmt: skip


def test_runs_with_different_training_budgets_are_refused(tmp_path):
    runs = tmp_path / "runs"
    grpo, sdar = payload(0, 0.5), payload(0, 0.5, method="sdar")
    grpo["config"]["trainer"] = {"num_rollouts": 3, "learning_rate": 3e-5}
    sdar["config"]["trainer"] = {"num_rollouts": 6, "learning_rate": 3e-5}  # a 6-rollout run against a 3-rollout one
    write(runs, "GRPO", 0, grpo)
    write(runs, "SDAR", 0, sdar)
    with pytest.raises(SystemExit, match="GRPO seed 0; SDAR seed 0"):
        main(["GRPO=agentopsd:x", "SDAR=sdar:x", "--env", "textrooms", "--out", str(tmp_path / "o"),
              "--runs", str(runs)])  # fmt: skip
    sdar["config"]["trainer"]["num_rollouts"] = 3
    (runs / "SDAR" / "seed0" / "results.json").write_text(json.dumps(sdar))
    main(["GRPO=agentopsd:x", "SDAR=sdar:x", "--env", "textrooms", "--out", str(tmp_path / "o"), "--runs", str(runs),
          "--note", "SkillRise: not a row (its own panel)."])  # fmt: skip
    assert (tmp_path / "o" / "compare.md").read_text().endswith("|\n\nSkillRise: not a row (its own panel).\n")


def test_finished_runs_of_a_reproduce_plan_are_reused(tmp_path, monkeypatch):
    runs, plan, out = tmp_path / "runs", tmp_path / "sdar_cpu", tmp_path / "out"
    write(runs, "GRPO", 0, payload(0, 0.5))
    write(plan, "sdar", 0, payload(0, 0.6, method="sdar"))
    trained = []
    monkeypatch.setattr("agentrl_shared.compare.train", lambda *args: trained.append(args))
    main(["GRPO=agentopsd:x:grpo", "SDAR=sdar:x:sdar", "--env", "textrooms", "--out", str(out), "--runs", str(runs),
          "--reuse", f"SDAR={plan / 'sdar'}"])  # fmt: skip
    assert trained == []  # the plan's finished SDAR run stands in for a new one
    assert json.loads((out / "compare.json").read_text())["SDAR"][0]["run"] == str(plan / "sdar" / "seed0")
    assert "| SDAR | 60.0 (1 seed) | 0 | abc1234 |" in (out / "compare.md").read_text()


def test_a_reused_run_must_match_method_and_overrides(tmp_path, monkeypatch):
    runs, plan = tmp_path / "runs", tmp_path / "plan"
    write(plan, "sdar", 0, payload(0, 0.6, method="grpo_opsd"))  # another method of the plan
    trained = []

    def fake_train(package, config, method, seed, run, overrides):
        trained.append((method, seed, tuple(overrides)))
        write(runs, "SDAR", seed, payload(seed, 0.7, method=method))

    monkeypatch.setattr("agentrl_shared.compare.train", fake_train)
    monkeypatch.setattr("agentrl_shared.cli.cpu_bf16_flags", lambda: [])  # a CPU without native bf16: fp32
    main(["SDAR=sdar:x:sdar", "--env", "textrooms", "--out", str(tmp_path / "o"), "--runs", str(runs),
          "--reuse", f"SDAR={plan / 'sdar'}"])  # fmt: skip
    assert trained == [("sdar", 0, ())]
    write(plan, "sdar", 1, payload(1, 0.6, method="sdar"))
    main(["SDAR=sdar:x:sdar", "--env", "textrooms", "--seeds", "1", "--out", str(tmp_path / "o"), "--runs",
          str(runs), "--reuse", f"SDAR={plan / 'sdar'}", "--override", "trainer.learning_rate=1e-5"])  # fmt: skip
    assert trained[-1] == ("sdar", 1, ("trainer.learning_rate=1e-5",))  # overrides: never reused
    with pytest.raises(SystemExit, match="not entries: RLSD"):
        main(["SDAR=sdar:x:sdar", "--env", "textrooms", "--out", str(tmp_path / "o"), "--runs", str(runs),
              "--reuse", "RLSD=somewhere"])  # fmt: skip


def test_runs_train_in_the_cpu_precision_and_mixed_precisions_are_refused(tmp_path, monkeypatch):
    """As the packages' CPU plans: bf16 autocast where the CPU has native bf16 (an explicit trainer.bf16 wins), and a
    table never mixes a bf16 run with an fp32 one."""
    runs, trained = tmp_path / "runs", []

    def fake_train(package, config, method, seed, run, overrides):
        trained.append(tuple(overrides))
        write(runs, "SDAR", seed, {**payload(seed, 0.7, method=method), "precision": "bf16"})

    monkeypatch.setattr("agentrl_shared.compare.train", fake_train)
    monkeypatch.setattr("agentrl_shared.cli.cpu_bf16_flags", lambda: ["amx_bf16"])
    main(["SDAR=sdar:x:sdar", "--env", "textrooms", "--out", str(tmp_path / "o"), "--runs", str(runs)])
    assert trained == [("trainer.bf16=true",)]
    write(runs, "GRPO", 0, payload(0, 0.5))  # filed before precision was recorded: fp32
    with pytest.raises(SystemExit, match="precision .*GRPO seed 0; SDAR seed 0"):
        main(["GRPO=agentopsd:x", "SDAR=sdar:x:sdar", "--env", "textrooms", "--out", str(tmp_path / "o"),
              "--runs", str(runs)])  # fmt: skip


def test_plot_band_is_mean_plus_minus_sample_std():
    from agentrl_shared.report import band

    mean, low, high = band([[0.0, 0.0, 0.0, 1.0], [0.5]])
    assert mean == pytest.approx([0.25, 0.5])
    assert low == pytest.approx([-0.25, 0.5])  # sample std 0.5 (min-max would give 0..1); one seed: zero width
    assert high == pytest.approx([0.75, 0.5])


def test_methods_evaluated_once_get_their_seed_band_as_error_bars_side_by_side(tmp_path, monkeypatch):
    import matplotlib.axes

    from agentrl_shared.report import plot_curves

    calls, real = [], matplotlib.axes.Axes.errorbar

    def spy(self, x, y, **kw):
        calls.append((list(x), list(y), kw["yerr"]))
        return real(self, x, y, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", spy)
    series = {"A": [[(12, 40.0)], [(12, 50.0)]], "B": [[(12, 30.0)], [(12, 30.0)]]}
    plot_curves(series, tmp_path / "c.png", "rollouts", "%", "final only", {"untrained": 41.0})
    assert [x for x, _, _ in calls] == [pytest.approx([11.925]), pytest.approx([12.075])]  # dodged, not on top
    assert calls[0][1] == [45.0] and calls[0][2] == [[pytest.approx(7.0710678)]] * 2  # mean +- sample std
    assert calls[1][2] == [[0.0], [0.0]]
    assert (tmp_path / "c.png").stat().st_size > 0


def test_horizon_slope_is_the_least_squares_slope_of_success_on_turns(tmp_path):
    import json

    from agentrl_shared.report import final_episodes, horizon_slope

    eps = [{"turns": t, "won": w, "failed": f} for t, w, f in ((1, True, False), (2, True, False), (3, False, False),
                                                               (3, True, True))]  # fmt: skip
    # x = 1, 2, 3, 3 (mean 2.25), y = 100, 100, 0, 0 (a failed episode is no success):
    # Sxy = -1.25 * 50 - 0.25 * 50 - 0.75 * 50 - 0.75 * 50 = -150, Sxx = 2.75
    assert abs(horizon_slope(eps) - (-150 / 2.75)) < 1e-9
    assert horizon_slope([{"turns": 2, "won": True, "failed": False}] * 3) is None
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").write_text(json.dumps(eps[0]) + "\n")
    assert final_episodes(run) == [eps[0]]  # a standalone evaluation
    (run / "eval_episodes.jsonl").write_text("".join(json.dumps({"rollouts": r, **eps[0]}) + "\n" for r in (0, 5, 5)))
    assert final_episodes(run) == [{"rollouts": 5, **eps[0]}] * 2  # a training run: its last evaluation


def test_a_finished_plan_prints_its_table_and_writes_its_curves(tmp_path):
    import json

    from agentrl_shared.report import plan_summary

    for method, seed, success, key in (("untrained", 0, 0.25, "eval_seconds"), ("grpo", 0, 0.5, "train_seconds"),
                                       ("grpo", 1, 0.7, "train_seconds")):  # fmt: skip
        run = tmp_path / "cpu" / method / f"seed{seed}"
        run.mkdir(parents=True)
        curve = [] if method == "untrained" else [{"rollouts": 3, "success_rate_mean": success}]
        (run / "results.json").write_text(json.dumps({"final": {"success_rate_mean": success}, key: 100.0 + seed,
                                                      "curve": curve}))  # fmt: skip
    text = plan_summary(tmp_path, "cpu", {"untrained": "Vanilla", "grpo": "GRPO", "sdar": "SDAR"}, "t")
    assert "| Vanilla | 25.0 (1 seed) | 1 | 100 |" in text and "| GRPO | 60.0 +- 14.1 (2 seeds) | 2 | 100 |" in text
    assert "SDAR" not in text and "301 s of runs in all" in text
    assert (tmp_path / "cpu" / "learning_curves.png").stat().st_size > 0


def episodes_run(root, seed: int, wins: list[bool], tasks: list[str] | None = None):
    """A run folder with a results.json (training seed) and a final evaluation of `wins` on tasks t0, t1, ..."""
    root.mkdir(parents=True)
    (root / "results.json").write_text(json.dumps(payload(seed, sum(wins) / len(wins))))
    tasks = tasks or [f"t{i}" for i in range(len(wins))]
    (root / "eval_episodes.jsonl").write_text("".join(
        json.dumps({"rollouts": 3, "task_id": t, "seed": 1000, "won": w, "failed": False}) + "\n"
        for t, w in zip(tasks, wins, strict=True)))  # fmt: skip
    return root


def test_paired_difference_to_the_baseline_with_a_bootstrap_interval(tmp_path):
    from agentrl_shared.report import paired_difference

    base = [episodes_run(tmp_path / "b0", 0, [True, False, False, True]),
            episodes_run(tmp_path / "b1", 1, [False, False, True, True])]  # fmt: skip
    mine = [episodes_run(tmp_path / "m0", 0, [True, True, False, True]),
            episodes_run(tmp_path / "m1", 1, [True, False, True, False])]  # fmt: skip
    d = paired_difference(mine, base)
    # per instance, averaged over the 2 seeds: t0 (0 + 100) / 2 = 50, t1 50, t2 0, t3 (0 - 100) / 2 = -50
    assert d["mean"] == pytest.approx(12.5) and (d["instances"], d["seeds"], d["better"], d["worse"]) == (4, 2, 2, 1)
    assert -50 <= d["lo"] < d["mean"] < d["hi"] <= 50
    assert d["per_seed"] == [25.0, 0.0] and -50 <= d["lo_seeds"] <= d["mean"] <= d["hi_seeds"] <= 50
    assert paired_difference(mine, base) == d  # a fixed generator: the same report every time
    same = paired_difference(base, base)
    assert (same["mean"], same["lo"], same["hi"], same["better"], same["worse"]) == (0, 0, 0, 0, 0)
    assert paired_difference(mine[:1], base[1:]) is None  # seeds 0 and 1 do not pair
    other = [episodes_run(tmp_path / "o0", 0, [True, True, False, True], tasks=["t0", "t1", "t2", "t9"])]
    with pytest.raises(ValueError, match="seed 0: .* different panels"):
        paired_difference(other, base)


def test_the_seed_interval_counts_the_spread_between_training_runs_that_the_instance_interval_cannot_see(tmp_path):
    """Seed 0's method beats the baseline on every instance, seed 1's loses every one: per instance the differences
    cancel, so resampling instances sees no spread at all, while resampling seeds too spans both runs."""
    from agentrl_shared.report import paired_difference

    base = [episodes_run(tmp_path / f"b{s}", s, [s == 1] * 4) for s in (0, 1)]
    mine = [episodes_run(tmp_path / f"m{s}", s, [s == 0] * 4) for s in (0, 1)]
    d = paired_difference(mine, base)
    assert (d["mean"], d["lo"], d["hi"], d["per_seed"]) == (0.0, 0.0, 0.0, [100.0, -100.0])
    assert d["lo_seeds"] == -100.0 and d["hi_seeds"] == 100.0  # each seed drawn twice has probability 1/4
    one = paired_difference(mine[:1], base[:1])
    assert one["lo_seeds"] is None and one["hi_seeds"] is None and one["per_seed"] == [100.0]


def test_compare_table_carries_the_paired_difference_to_grpo(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    episodes_run(runs / "GRPO" / "seed0", 0, [True, False, False, True])
    episodes_run(runs / "SDAR" / "seed0", 0, [True, True, False, True])
    main(["GRPO=agentopsd:x:grpo", "SDAR=sdar:x", "--env", "textrooms", "--seeds", "0", "--out", str(out),
          "--runs", str(runs)])  # fmt: skip
    text = (out / "compare.md").read_text()
    assert "| Method - GRPO | success pts (paired mean) |" in text
    assert "| SDAR | +25.0 | [+0.0, +75.0] | - (1 seed) | 4 x 1 | +25.0 | 1 / 0 |" in text


def test_an_entry_s_own_overrides_train_after_the_common_ones_and_are_never_reused(tmp_path, monkeypatch):
    runs, plan = tmp_path / "runs", tmp_path / "plan"
    write(plan, "sdar", 0, payload(0, 0.6, method="sdar"))  # the plan's run at the default coefficient
    trained = []

    def fake_train(package, config, method, seed, run, overrides):
        trained.append((run.parent.name, method, tuple(overrides)))
        write(runs, run.parent.name, seed, payload(seed, 0.7, method=method))

    monkeypatch.setattr("agentrl_shared.compare.train", fake_train)
    monkeypatch.setattr("agentrl_shared.cli.cpu_bf16_flags", lambda: [])  # fp32: no precision override
    main(["SDAR=sdar:x:sdar", "SDAR x100=sdar:x:sdar:trainer.sdar_coef=1.0", "--env", "textrooms", "--out",
          str(tmp_path / "o"), "--runs", str(runs), "--reuse", f"SDAR={plan / 'sdar'}", "--reuse",
          f"SDAR x100={plan / 'sdar'}"])  # fmt: skip
    assert trained == [("SDAR x100", "sdar", ("trainer.sdar_coef=1.0",))]  # SDAR reused the plan's run, x100 trained
    main(["SDAR x100=sdar:x:sdar:trainer.sdar_coef=1.0", "--env", "textrooms", "--seeds", "1", "--out",
          str(tmp_path / "o"), "--runs", str(runs), "--override", "trainer.learning_rate=1e-5"])  # fmt: skip
    assert trained[-1] == ("SDAR x100", "sdar", ("trainer.learning_rate=1e-5", "trainer.sdar_coef=1.0"))


def test_comparisons_are_filed_together_and_each_table_fills_its_own_readme_block(tmp_path):
    runs, out, long, results = tmp_path / "runs", tmp_path / "sdar_coef", tmp_path / "sdar_long", tmp_path / "results"
    for label, success in (("GRPO", 0.5), ("SDAR-x100", 0.75)):
        write(runs, label, 0, payload(0, success))
    main(["GRPO=sdar:x:grpo", "SDAR-x100=sdar:x:sdar:trainer.sdar_coef=1.0", "--env", "textrooms", "--out", str(out),
          "--runs", str(runs)])  # fmt: skip
    with pytest.raises(ConfigError, match="sdar_long has no compare.md, compare.json, learning_curves.png: run `make"):
        file_compares([out, long], results)
    assert not (results / "compare").exists()  # one unfinished plan files none
    main(["GRPO=sdar:x:grpo", "--env", "textrooms", "--out", str(long), "--runs", str(runs)])
    assert file_compares([out, long], results) == [
        results / "compare" / "sdar_coef",
        results / "compare" / "sdar_long",
    ]
    readme = ("# R\n<!-- compare-sdar_coef:start -->\nold\n<!-- compare-sdar_coef:end -->\n"
              "<!-- compare-sdar_long:start -->\nold\n<!-- compare-sdar_long:end -->\ntail\n")  # fmt: skip
    text = compare_blocks(readme, results)
    assert "| textrooms | smollm2-135m | SDAR-x100 | 75.0 (1 seed) | 0 | abc1234 |" in text and "old" not in text
    assert text.endswith("<!-- compare-sdar_long:end -->\ntail\n")
    with pytest.raises(ValueError, match="no <!-- compare-sdar_coef:start -->"):
        compare_blocks("# a README without the block\n", results)
