"""Worker pool: one process per environment slot, per-call timeouts, crash isolation.

Each slot hosts one environment in its own process (`spawn` context, so a JVM or a game engine never shares a
process with torch). A new worker first builds its environment under `build_timeout` (loading a game engine or a
catalogue can take minutes); `call_all` then sends one request to many slots and waits for all of them under one
`timeout`. A slot whose environment raises, dies or exceeds a timeout returns an `EnvFailure` for that episode and is
restarted with a fresh process (an exception may leave the engine in any state, so it is treated as a crash); the run
goes on. Large read-only data (a WebShop catalogue, a retrieval index) is not built per worker: the adapters share
it per node (`retrieval.node_service`). `num_workers=0` runs the environments in-process (debugging and the
single-process baseline of `make bench`).

Cheap environments in-process (`move_cheap_in=True`): a worker pays a pipe round trip and two pickles per step,
which dominates an environment whose step costs well under a millisecond (TextRooms, a WebShop click, a Search-QA
lookup in a small index). The pool decides by measuring both ways on the calls it serves:
1. Probe: over the first `PROBE_CALLS` step calls served by workers, the wall time of each pooled call (in this
   process) and the workers' CPU seconds of the same steps (`time.process_time` in each worker, summed over the
   slots of a call: what the call would cost one step after another here if the step is CPU-bound). The workers'
   wall time would not do: on shared cores it includes each worker's wait for the CPU.
2. Trial: if that CPU estimate is under `TRIAL_BELOW` of the pooled wall time, each slot moves into this process at
   its next reset (its worker is closed) and the pool times `PROBE_CALLS` in-process step calls with the slots
   stepped one after another, then `PROBE_CALLS` with each slot stepped in a thread of its own. A CPU estimate alone
   would not do either: an IO-bound step (HTTP retrieval, a JVM subprocess whose CPU is in another process) looks
   cheap on it, and it is the threads that overlap such steps' waits (the GIL is released while they wait; four
   ScienceWorld JVMs stepped from threads take about 0.7x the time of one after another). A CPU-bound step whose
   pooled call is mostly the steps themselves (or runs them on several cores in parallel) does not try: the gain
   would not pay for a trial that, lost, rebuilds every worker.
3. Decision: the fastest of the three per call stays for good; if both trials were slower than the workers, each
   slot moves back into a new worker at its next reset. The threads trial runs after the one-after-another trial, on
   engines a few calls warmer (a JVM's just-in-time compiler keeps speeding up for hundreds of calls): where threads
   win by less than that drift, either placement is about as fast.
Only calls whose slots are all on one side count, and episodes never move mid-way. A slot in this process keeps the
raised-error handling (its episode fails, the environment is rebuilt) but has no timeout and no crash isolation;
`move_cheap_in=False` keeps every slot in its worker. In threads, each slot's environment is only ever stepped by one
thread at a time (a call waits for all its slots) and resets run one after another, so an environment's step needs
no thread safety of its own beyond not sharing mutable state with the other slots' environments.
"""

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait

from .base import EnvFailure, Step, TextEnv


PROBE_CALLS = 8  # step calls measured on each side: pooled (probe), then in-process one after another and threaded
TRIAL_BELOW = 0.8  # try in-process when the workers' CPU estimate is under this fraction of the pooled wall time


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
            conn.send(("ok", None, 0.0))
            break
        try:
            if cmd == "build":
                env = factory()
                result = None
            elif cmd == "reset":
                task, seed = payload
                result = env.reset(task, seed)
            elif cmd == "step":
                t0 = time.process_time()
                result = env.step(payload)
                conn.send(("ok", result, time.process_time() - t0))  # this process's CPU seconds of the step
                continue
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send(("ok", result, 0.0))
        except Exception as exc:  # reported to the parent, which marks the episode failed
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}", 0.0))


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
        move_cheap_in (`bool`, *optional*, defaults to `True`): move the slots into this process when step calls
            there are measured faster than pooled ones (module docstring).

    `step_cost` holds the measurement (module docstring): `pooled_calls` and `pooled_s` (their wall seconds),
    `worker_cpu_s` (the workers' CPU seconds of the same steps, summed over slots), `in_process_calls` and
    `in_process_s` (the one-after-another trial's wall seconds), `threaded_calls` and `threaded_s` (the threads
    trial's), and the decision: `in_process` None until made, True when the slots stay in this process, False when
    they stay in (or go back to) their workers; `threaded` True when the slots in this process step in threads.
    """

    def __init__(
        self,
        factory: Callable[[], TextEnv],
        num_slots: int,
        timeout: float = 60.0,
        num_workers: int = 1,
        build_timeout: float = 900.0,
        move_cheap_in: bool = True,
    ):
        self.factory, self.num_slots, self.timeout, self.build_timeout = factory, num_slots, timeout, build_timeout
        self.in_process = num_workers == 0
        self.move_cheap_in = move_cheap_in and not self.in_process
        self.failures = 0
        self.step_cost = {
            "pooled_calls": 0,
            "pooled_s": 0.0,
            "worker_cpu_s": 0.0,
            "in_process_calls": 0,
            "in_process_s": 0.0,
            "threaded_calls": 0,
            "threaded_s": 0.0,
            "in_process": None,
            "threaded": False,
        }
        self._threads: ThreadPoolExecutor | None = None  # started at the threads trial
        self._ctx = mp.get_context("spawn")
        self._envs: list[TextEnv | None] = [None] * num_slots
        self._local = [self.in_process] * num_slots  # slot i steps in this process
        if not self.in_process:
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
        if cmd == "reset" and self.move_cheap_in:
            self._move(slots)
        t0 = time.perf_counter()
        if all(self._local[i] for i in slots):
            results, cpu_s = self._call_locals(slots, cmd, payloads), 0.0
        else:
            here = [(i, p) for i, p in zip(slots, payloads, strict=True) if self._local[i]]
            by_slot = dict(zip([i for i, _ in here], self._call_locals([i for i, _ in here], cmd, [p for _, p in here]),
                               strict=True))  # fmt: skip
            remote = [(i, p) for i, p in zip(slots, payloads, strict=True) if not self._local[i]]
            done, cpu_s = self._call_workers([i for i, _ in remote], cmd, [p for _, p in remote])
            by_slot.update(done)
            results = [by_slot[i] for i in slots]
        if cmd == "step" and self.move_cheap_in and self.step_cost["in_process"] is None:
            self._measure(slots, time.perf_counter() - t0, cpu_s)
        return results

    def _move(self, slots: list[int]) -> None:
        """At a reset (an episode boundary), move each slot to the side the decision puts it on: this process during
        the trial and after a won one, a worker before the trial and after a lost one."""
        cost = self.step_cost
        local = cost["in_process"] is True or (cost["in_process"] is None and cost["pooled_calls"] == PROBE_CALLS)
        for i in slots:
            if local and not self._local[i]:
                self._stop(i)
            elif self._local[i] and not local:  # the trial was slower: a new worker, built at this reset
                if self._envs[i] is not None:
                    self._envs[i].close()
                    self._envs[i] = None
                self._start(i)
            self._local[i] = local

    def _measure(self, slots: list[int], wall_s: float, cpu_s: float) -> None:
        """Count one step call towards the probe (all slots in workers) or the trial (all in this process)."""
        cost = self.step_cost
        sides = {self._local[i] for i in slots}
        if sides == {False} and cost["pooled_calls"] < PROBE_CALLS:
            cost["pooled_calls"] += 1
            cost["pooled_s"] += wall_s
            cost["worker_cpu_s"] += cpu_s
            if cost["pooled_calls"] == PROBE_CALLS and cost["worker_cpu_s"] >= TRIAL_BELOW * cost["pooled_s"]:
                cost["in_process"] = False  # no trial: in-process could not be enough cheaper
        elif sides == {True} and cost["pooled_calls"] == PROBE_CALLS:
            trial = "in_process" if cost["in_process_calls"] < PROBE_CALLS else "threaded"
            cost[f"{trial}_calls"] += 1
            cost[f"{trial}_s"] += wall_s
            if cost["threaded_calls"] == PROBE_CALLS:  # as many calls on each side: compare the sums
                cost["in_process"] = min(cost["in_process_s"], cost["threaded_s"]) < cost["pooled_s"]
                cost["threaded"] = cost["in_process"] and cost["threaded_s"] < cost["in_process_s"]

    def _call_workers(self, slots: list[int], cmd: str, payloads: list) -> tuple[dict[int, Step | EnvFailure], float]:
        """`cmd` to the slots' workers (building the unbuilt ones first); returns the results and the workers' CPU
        seconds of the call."""
        unbuilt = [i for i in slots if not self._built[i]]
        results, _ = self._send(unbuilt, "build", [None] * len(unbuilt), self.build_timeout)
        for i in unbuilt:
            self._built[i] = i not in results  # a successful build leaves no result
        todo = [(i, p) for i, p in zip(slots, payloads, strict=True) if i not in results]
        done, cpu_s = self._send([i for i, _ in todo], cmd, [p for _, p in todo], self.timeout)
        results.update(done)
        return results, cpu_s

    def _send(self, slots: list[int], cmd: str, payloads: list, timeout: float) -> tuple[dict, float]:
        """`cmd` to every slot, results under one deadline; build results (`None`) are kept only when they fail.
        Returns `({slot: Step | EnvFailure}, the workers' CPU seconds of their steps, summed over the slots that
        answered)`."""
        results: dict[int, Step | EnvFailure] = {}
        cpu_s = 0.0
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
                    status, value, seconds = conn.recv()
                except (EOFError, OSError):
                    results[i] = self._fail(i, f"worker crashed during {cmd} (exit code {self._procs[i].exitcode})")
                    continue
                if status != "ok":  # the environment raised: restart the worker like a crashed one
                    results[i] = self._fail(i, value)
                elif cmd != "build":
                    results[i] = value
                cpu_s += seconds
        return results, cpu_s

    def _call_locals(self, slots: list[int], cmd: str, payloads: list) -> list[Step | EnvFailure]:
        """`cmd` to slots in this process: one after another, or, for steps during the threads trial and after a won
        one, each slot in a thread of its own (a call waits for all of them, so no environment is ever stepped by two
        threads). Resets, which build environments and may seed process-wide state (ALFWorld's task sentence is
        drawn with the global `random`), always run one after another."""
        cost = self.step_cost
        threads = cost["threaded"] or (cost["in_process"] is None and cost["in_process_calls"] == PROBE_CALLS)
        if cmd == "step" and threads:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(max_workers=self.num_slots, thread_name_prefix="env")
            results = list(self._threads.map(self._call_local, slots, [cmd] * len(slots), payloads))
        else:
            results = [self._call_local(i, cmd, p) for i, p in zip(slots, payloads, strict=True)]
        self.failures += sum(isinstance(r, EnvFailure) for r in results)  # counted here, not in the threads
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
            return EnvFailure(f"{type(exc).__name__}: {exc}")

    def _fail(self, i: int, message: str) -> EnvFailure:
        """A worker's failure: counted, and the worker restarted (its engine may be in any state)."""
        self.failures += 1
        self._restart(i)
        return EnvFailure(message)

    def _stop(self, i: int) -> None:
        """Close slot i's worker (and its environment)."""
        conn = self._conns[i]
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

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
        for i in range(self.num_slots):
            if self._local[i]:
                if self._envs[i] is not None:
                    self._envs[i].close()
            else:
                self._stop(i)

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
