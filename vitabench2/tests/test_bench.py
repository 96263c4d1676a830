"""`make bench` figures: concurrency 8 beats concurrency 1 on a fixed-delay scripted back end; JSON merge."""

import json

from vitabench2.bench import main, merge_results


def test_bench_speedup_and_merge(tmp_path, capsys):
    path = tmp_path / "bench-results.json"
    path.write_text(json.dumps({"sdar/x": 1.0}))
    figures = main(["--users", "8", "--delay", "0.05", "--output", str(path)])
    assert figures["speedup_8_vs_1"] > 2.0  # 8 independent users, sleep-bound calls (loose: shared CPU)
    data = json.loads(path.read_text())
    assert data["sdar/x"] == 1.0 and data["vitabench2/speedup_8_vs_1"] == figures["speedup_8_vs_1"]
    assert "concurrency 8" in capsys.readouterr().out
    merge_results(path, {"speedup_8_vs_1": 9.0}, {})
    assert json.loads(path.read_text())["vitabench2/speedup_8_vs_1"] == 9.0
