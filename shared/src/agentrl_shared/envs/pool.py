"""Worker pool: one process per environment slot, per-call timeouts, crash isolation.

Each slot hosts one environment in its own process (`spawn` context, so a JVM or a game engine never shares a
process with torch). A new worker first builds its environment under `build_timeout` (loading a game engine or a
catalogue can take minutes); `call_all` then sends one request to many slots and waits for all of them under one
`timeout`. A slot whose environment raises, dies or exceeds a timeout returns an `EnvFailure` for that episode and is
restarted with a fresh process (an exception may leave the engine in any state, so it is treated as a crash); the run
goes on. Large read-only data (a WebShop catalogue, a retrieval index) is not built per worker: the adapters share
it per node (`retrieval.node_service`). `num_workers=0` runs the environments in-process (debugging and the
single-process baseline of `make bench`).
"""

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from .base import EnvFailure, Step, TextEnv


def _worker(conn: Connection, factory: Callable[[], TextEnv]) -> None:
    env = None
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if cmd == "close":
            if env is not None:
                env.close()
            conn.send(("ok", None))
            break
        try:
            if cmd == "build":
                env = factory()
                result = None
            elif cmd == "reset":
                task, seed = payload
                result = env.reset(task, seed)
            elif cmd == "step":
                result = env.step(payload)
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send(("ok", result))
        except Exception as exc:  # reported to the parent, which marks the episode failed
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))


class EnvPool:
    """`num_slots` environments built by `factory` (a picklable zero-argument callable).

    Args:
        factory (`Callable[[], TextEnv]`): builds one environment; must be picklable (a module-level function or a
            `functools.partial` of one) when `num_workers > 0`.
        num_slots (`int`): environment instances (one per concurrent episode).
        timeout (`float`, *optional*, defaults to `60.0`): seconds one reset/step may take before the slot is killed.
        num_workers (`int`, *optional*): `0` runs in-process; any other value uses one process per slot.
        build_timeout (`float`, *optional*, defaults to `900.0`): seconds a new worker may take to build its
            environment (engine start, data loading), separate from `timeout`.
    """

    def __init__(
        self,
        factory: Callable[[], TextEnv],
        num_slots: int,
        timeout: float = 60.0,
        num_workers: int = 1,
        build_timeout: float = 900.0,
    ):
        self.factory, self.num_slots, self.timeout, self.build_timeout = factory, num_slots, timeout, build_timeout
        self.in_process = num_workers == 0
        self.failures = 0
        self._ctx = mp.get_context("spawn")
        if self.in_process:
            self._envs: list[TextEnv | None] = [None] * num_slots
        else:
            self._procs: list = [None] * num_slots
            self._conns: list[Connection | None] = [None] * num_slots
            self._built = [False] * num_slots
            for i in range(num_slots):
                self._start(i)

    def _start(self, i: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child, self.factory), daemon=True)
        proc.start()
        child.close()
        self._procs[i], self._conns[i], self._built[i] = proc, parent, False

    def _restart(self, i: int) -> None:
        proc = self._procs[i]
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)
        self._conns[i].close()
        self._start(i)

    def reset(self, slots: list[int], tasks: list[dict], seeds: list[int]) -> list[Step | EnvFailure]:
        return self.call_all(slots, "reset", list(zip(tasks, seeds, strict=True)))

    def step(self, slots: list[int], actions: list[str]) -> list[Step | EnvFailure]:
        return self.call_all(slots, "step", actions)

    def call_all(self, slots: list[int], cmd: str, payloads: list) -> list[Step | EnvFailure]:
        """Send `cmd` to every slot at once and collect results in order; failures come back as `EnvFailure`."""
        if self.in_process:
            return [self._call_local(i, cmd, p) for i, p in zip(slots, payloads, strict=True)]
        unbuilt = [i for i in slots if not self._built[i]]
        results = self._send(unbuilt, "build", [None] * len(unbuilt), self.build_timeout)
        for i in unbuilt:
            self._built[i] = i not in results  # a successful build leaves no result
        todo = [(i, p) for i, p in zip(slots, payloads, strict=True) if i not in results]
        results.update(self._send([i for i, _ in todo], cmd, [p for _, p in todo], self.timeout))
        return [results[i] for i in slots]

    def _send(self, slots: list[int], cmd: str, payloads: list, timeout: float) -> dict[int, Step | EnvFailure]:
        """`cmd` to every slot, results under one deadline; build results (`None`) are kept only when they fail."""
        results: dict[int, Step | EnvFailure] = {}
        pending: dict[Connection, int] = {}
        for i, payload in zip(slots, payloads, strict=True):
            try:
                self._conns[i].send((cmd, payload))
                pending[self._conns[i]] = i
            except (BrokenPipeError, OSError) as exc:
                results[i] = self._fail(i, f"worker died before {cmd}: {exc}")
        deadline = time.monotonic() + timeout
        while pending:
            ready = wait(list(pending), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:  # every slot still pending has hung past the deadline
                for conn, i in list(pending.items()):
                    results[i] = self._fail(i, f"{cmd} timed out after {timeout:.1f}s")
                    del pending[conn]
                break
            for conn in ready:
                i = pending.pop(conn)
                try:
                    status, value = conn.recv()
                except (EOFError, OSError):
                    results[i] = self._fail(i, f"worker crashed during {cmd} (exit code {self._procs[i].exitcode})")
                    continue
                if status != "ok":  # the environment raised: restart the worker like a crashed one
                    results[i] = self._fail(i, value)
                elif cmd != "build":
                    results[i] = value
        return results

    def _call_local(self, i: int, cmd: str, payload) -> Step | EnvFailure:
        try:
            if self._envs[i] is None:
                self._envs[i] = self.factory()
            if cmd == "reset":
                return self._envs[i].reset(*payload)
            return self._envs[i].step(payload)
        except Exception as exc:
            self._envs[i] = None
            return self._fail(i, f"{type(exc).__name__}: {exc}", restart=False)

    def _fail(self, i: int, message: str, restart: bool = True) -> EnvFailure:
        self.failures += 1
        if restart and not self.in_process:
            self._restart(i)
        return EnvFailure(message)

    def close(self) -> None:
        if self.in_process:
            for env in self._envs:
                if env is not None:
                    env.close()
            return
        for i, conn in enumerate(self._conns):
            try:
                conn.send(("close", None))
                if conn.poll(5):
                    conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
            self._procs[i].join(timeout=5)
            if self._procs[i].is_alive():
                self._procs[i].kill()
            conn.close()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
