"""The four adapters in the worker pool: timeouts, a killed worker, and group determinism (same task and seed give
the same start state in every slot). Uses the offline fixtures; ALFWorld and ScienceWorld only with their extras.
"""

import functools
import os
import signal
import time

import pytest

from agentrl_shared.envs import EnvFailure, make_env
from agentrl_shared.envs import search_qa as S
from agentrl_shared.envs import webshop as W
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.testing import write_synthetic_catalog, write_synthetic_games, write_synthetic_qa


class SlowEnv:
    """Wraps an adapter and sleeps on one action (a hung engine)."""

    def __init__(self, name, **kwargs):
        self.env = make_env(name, **kwargs)

    def reset(self, task, seed):
        return self.env.reset(task, seed)

    def step(self, action):
        if action == "hang":
            time.sleep(30)
        if action == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.step(action)

    def close(self):
        self.env.close()


@pytest.fixture(scope="module")
def webshop_setup(tmp_path_factory):
    d = write_synthetic_catalog(tmp_path_factory.mktemp("ws"))
    return d, W.load_tasks("all", d)


def test_webshop_pool_group_same_start_timeout_and_kill(webshop_setup):
    d, tasks = webshop_setup
    factory = functools.partial(SlowEnv, "webshop", data_dir=str(d))
    with EnvPool(factory, num_slots=3, timeout=5.0, num_workers=3) as pool:
        out = pool.reset([0, 1, 2], [tasks[0]] * 3, [0, 0, 0])
        assert len({s.observation for s in out}) == 1
        res = pool.step([0, 1, 2], ["search[shoes]", "hang", "die"])
        assert not isinstance(res[0], EnvFailure) and "Page 1" in res[0].observation
        assert isinstance(res[1], EnvFailure) and "timed out" in str(res[1])
        assert isinstance(res[2], EnvFailure) and "crashed" in str(res[2])
        again = pool.reset([1, 2], [tasks[1]] * 2, [0, 0])  # restarted slots work again
        assert all(not isinstance(s, EnvFailure) for s in again)


def test_search_qa_pool_matches_in_process(tmp_path):
    d = write_synthetic_qa(tmp_path)
    tasks = S.load_qa(d / "test.jsonl")[:2]
    factory = functools.partial(make_env, "search_qa", corpus_path=str(d / "corpus.jsonl"))
    results = []
    for workers in (0, 2):
        with EnvPool(factory, num_slots=2, timeout=20.0, num_workers=workers) as pool:
            pool.reset([0, 1], tasks, [0, 0])
            results.append([s.observation for s in pool.step([0, 1], ["<search>largest planet</search>"] * 2)])
    assert results[0] == results[1]


def test_alfworld_pool_and_killed_worker(tmp_path):
    pytest.importorskip("alfworld")
    from agentrl_shared.envs import alfworld as A

    write_synthetic_games(tmp_path, "train", n_games=2)
    tasks = A.load_tasks("train", tmp_path)
    factory = functools.partial(SlowEnv, "alfworld", expert_type="none")
    # a reset loads (compiles) the game in the engine: tens of seconds on a loaded 2-core machine
    with EnvPool(factory, num_slots=2, timeout=180.0, num_workers=2) as pool:
        out = pool.reset([0, 1], [tasks[0]] * 2, [3, 3])
        assert out[0].observation == out[1].observation
        res = pool.step([0, 1], ["go to countertop 1", "die"])
        assert "countertop 1" in res[0].observation and isinstance(res[1], EnvFailure)


def test_scienceworld_jvm_dies_with_killed_worker():
    pytest.importorskip("scienceworld")
    psutil = pytest.importorskip("psutil")
    task = {"task_id": "boil:0", "task_type": "boil", "task_name": "boil", "variation": 0}
    factory = functools.partial(SlowEnv, "scienceworld")
    with EnvPool(factory, num_slots=1, timeout=60.0, num_workers=1) as pool:
        assert not isinstance(pool.reset([0], [task], [0])[0], EnvFailure)
        worker = psutil.Process(pool._procs[0].pid)
        jvms = [c for c in worker.children(recursive=True) if "java" in c.name()]
        assert jvms
        assert isinstance(pool.step([0], ["die"])[0], EnvFailure)
        _, alive = psutil.wait_procs(jvms, timeout=15)
        assert not alive, "the JVM outlived its killed worker"
