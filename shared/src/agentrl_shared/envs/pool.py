"""Worker pool: environment slots in worker processes, per-step timeouts, crash isolation.

Each slot hosts one environment in a worker process (`spawn` context, so a JVM or a game engine never shares a
process with torch). By default there is one worker per slot, at most one per CPU core this rank may use
(`default_workers`): a worker hosting several slots steps them one after another, each answer sent as it is ready.
More CPU-bound workers than cores lose to their own switching (ALFWorld: four workers on two cores spend 16.4 ms of
CPU per step against 14 ms in one process), and one message per worker carries all its slots' requests. A new slot
is first built under `build_timeout` (loading a game engine or a catalogue can take minutes); `call_all` then sends
one request to many slots and waits for all of them, each slot's answer under its own `timeout` (counted from the
worker's previous answer). A slot whose environment raises returns an `EnvFailure` for that episode, and its worker
closes that environment and builds a new one at the slot's next call. A worker that dies or exceeds a timeout is
restarted with a fresh process: the slot it was serving fails, and so does every other episode it hosted (their
pending answers now, their next step after; their next reset starts afresh). Hosting fewer slots per worker narrows
that: `num_workers=num_slots` keeps one process per slot. The run goes on either way. Large read-only data (a WebShop
catalogue, a retrieval index) is not built per worker: the adapters share it per node (`retrieval.node_service`).
`num_workers=0` runs the environments in-process (debugging and the single-process baseline of `make bench`).

Cheap environments in-process (`move_cheap_in=True`): a worker pays a pipe round trip and two pickles per step,
which dominates an environment whose step costs well under a millisecond (TextRooms, a WebShop click, a Search-QA
lookup in a small index). The pool decides by measuring both ways on the calls it serves:
1. Probe: over the first `PROBE_CALLS` step calls served by workers, the wall time of each pooled call (in this
   process) and the workers' CPU seconds of the same steps (`time.process_time` in each worker, summed over the
   slots of a call: what the call would cost one step after another here if the step is CPU-bound). The workers'
   wall time would not do: on shared cores it includes each worker's wait for the CPU.
2. Trial: if that CPU estimate is under `TRIAL_BELOW` of the pooled wall time, each slot moves into this process at
   its next reset (its environment leaves its worker; a worker left with no slot is closed) and the pool times
   `PROBE_CALLS` in-process step calls with the slots stepped one after another, then `PROBE_CALLS` with each slot
   stepped in a thread of its own. A CPU estimate alone would not do either: an IO-bound step (HTTP retrieval, a JVM
   subprocess whose CPU is in another process) looks cheap on it, and it is the threads that overlap such steps'
   waits (the GIL is released while they wait; four ScienceWorld JVMs stepped from threads take about 0.7x the time
   of one after another). A CPU-bound step whose pooled call is mostly the steps themselves (or runs them on several
   cores in parallel) does not try: the gain would not pay for a trial that, lost, rebuilds every worker.
3. Decision: the fastest of the three per call stays for good; if both trials were slower than the workers, each slot
   moves back into its worker (a new one where it was closed) at its next reset. The threads trial runs after the
   one-after-another trial, on engines a few calls warmer (a JVM's just-in-time compiler keeps speeding up for
   hundreds of calls): where threads win by less than that drift, either placement is about as fast.
Only calls whose slots are all on one side count, and episodes never move mid-way. A slot in this process keeps the
raised-error handling (its episode fails, the environment is rebuilt) but has no timeout and no crash isolation;
`move_cheap_in=False` keeps every slot in its worker. In threads, each slot's environment is only ever stepped by one
thread at a time (a call waits for all its slots) and resets run one after another, so an environment's step needs
no thread safety of its own beyond not sharing mutable state with the other slots' environments.
"""

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait

from .base import EnvFailure, Step, TextEnv


PROBE_CALLS = 8  # step calls measured on each side: pooled (probe), then in-process one after another and threaded
TRIAL_BELOW = 0.8  # try in-process when the workers' CPU estimate is under this fraction of the pooled wall time


def local_ranks() -> int:
    """The ranks on this node, as the launcher says: `LOCAL_WORLD_SIZE` (torchrun, `accelerate launch`), else
    `LOCAL_SIZE` (DeepSpeed's launcher, which its multi-node pdsh/MPI runners start on every node), else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_SIZE") or 1)


def default_workers(num_slots: int) -> int:
    """One worker per slot, at most one per CPU core this rank may use: the cores this process may run on, shared by
    the node's ranks (`local_ranks`)."""
    return max(1, min(num_slots, len(os.sched_getaffinity(0)) // local_ranks()))


def _close_quietly(env: TextEnv | None) -> None:
    """Close an environment that raised: its engine may be in any state, and so may its close."""
    try:
        if env is not None:
            env.close()
    except Exception:  # the slot gets a new environment either way
        pass


def _worker(conn: Connection, factory: Callable[[], TextEnv]) -> None:
    """Serve `(cmd, [(slot, payload), ...])` requests: one answer `(slot, status, value, CPU seconds)` per slot, sent as
    soon as that slot is served (the parent's timeout is per answer)."""
    envs: dict[int, TextEnv] = {}
    while True:
        try:
            cmd, items = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if cmd == "close":
            for env in envs.values():
                env.close()
            conn.send(None)
            break
        for slot, payload in items:
            t0 = time.process_time()
            try:
                if cmd == "build":
                    envs[slot], result = factory(), None
                elif cmd == "drop":  # the slot moved into the parent's process
                    _close_quietly(envs.pop(slot, None))
                    result = None
                elif cmd == "reset":
                    result = envs[slot].reset(*payload)
                elif cmd == "step":
                    result = envs[slot].step(payload)
                else:
                    raise ValueError(f"unknown command {cmd!r}")
            except Exception as exc:  # reported to the parent, which fails the episode; the slot's next call rebuilds
                _close_quietly(envs.pop(slot, None))
                conn.send((slot, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}", 0.0))
                continue
            conn.send((slot, "ok", result, time.process_time() - t0))  # this process's CPU seconds of the request


class EnvPool:
    """`num_slots` environments built by `factory` (a picklable zero-argument callable).

    Args:
        factory (`Callable[[], TextEnv]`): builds one environment; must be picklable (a module-level function or a
            `functools.partial` of one) when `num_workers > 0`.
        num_slots (`int`): environment instances (one per concurrent episode).
        timeout (`float`, *optional*, defaults to `60.0`): seconds one slot's reset/step may take before its worker is
            killed (and restarted).
        num_workers (`int`, *optional*): worker processes, the slots spread over them round robin (at most one per
            slot); `0` runs in-process; `None` (default): `default_workers`, one per slot up to one per core.
        build_timeout (`float`, *optional*, defaults to `900.0`): seconds a worker may take to build one slot's
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
        num_workers: int | None = None,
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
            workers = min(num_slots, default_workers(num_slots) if num_workers is None else num_workers)
            self._home = [i % workers for i in range(num_slots)]  # slot i's worker
            self._procs: list = [None] * workers  # None: stopped (every slot it hosts moved into this process)
            self._conns: list[Connection | None] = [None] * workers
            self._built = [False] * num_slots  # slot i's environment exists in its worker
            self._lost = [False] * num_slots  # slot i's episode ended with its worker: its next step fails
            for w in range(workers):
                self._start(w)

    def _hosted(self, w: int) -> list[int]:
        """The slots worker w serves now (those of its slots not moved into this process)."""
        return [i for i, home in enumerate(self._home) if home == w and not self._local[i]]

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child, self.factory), daemon=True)
        proc.start()
        child.close()
        self._procs[w], self._conns[w] = proc, parent
        for i, home in enumerate(self._home):
            if home == w:
                self._built[i] = False

    def _restart(self, w: int) -> None:
        """A fresh process for worker w; every episode it hosted is lost (its environments went with the process)."""
        proc = self._procs[w]
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)
        self._conns[w].close()
        for i in self._hosted(w):
            self._lost[i] = True
        self._start(w)

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
                self._local[i] = True
                w = self._home[i]
                if not self._hosted(w):  # its worker serves no other slot: close it (and its environments)
                    self._stop(w)
                elif self._built[i]:
                    self._send([i], "drop", [None], self.timeout)
            elif self._local[i] and not local:  # the trial was slower: back to its worker, built at this reset
                if self._envs[i] is not None:
                    self._envs[i].close()
                    self._envs[i] = None
                self._local[i] = False
                if self._procs[self._home[i]] is None:
                    self._start(self._home[i])
                self._built[i] = False

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
        """`cmd` to the slots' workers (building the slots' environments first where needed); returns the results and
        the workers' CPU seconds of the call. A step to a slot whose episode was lost with its worker fails at once;
        a reset starts it afresh."""
        results: dict[int, Step | EnvFailure] = {}
        for i in slots:
            if cmd == "reset":
                self._lost[i] = False
            elif self._lost[i]:
                results[i] = self._failure(f"{cmd} not run: the episode was lost when its worker was restarted")
        unbuilt = [i for i in slots if i not in results and not self._built[i]]
        failed, _ = self._send(unbuilt, "build", [None] * len(unbuilt), self.build_timeout)
        results.update(failed)  # a successful build leaves no result
        for i in slots:  # built, then lost to a restart of its worker during the builds
            if i not in results and not self._built[i]:
                results[i] = self._failure(f"{cmd} not run: its worker was restarted while building")
        todo = [(i, p) for i, p in zip(slots, payloads, strict=True) if i not in results]
        done, cpu_s = self._send([i for i, _ in todo], cmd, [p for _, p in todo], self.timeout)
        results.update(done)
        return results, cpu_s

    def _send(self, slots: list[int], cmd: str, payloads: list, timeout: float) -> tuple[dict, float]:
        """`cmd` to every slot, one message per worker; each slot's answer is due within `timeout` of its worker's
        previous answer (or of the send). Build and drop results (`None`) are kept only when they fail. Returns
        `({slot: Step | EnvFailure}, the workers' CPU seconds of their requests, summed over the slots that
        answered)`."""
        results: dict[int, Step | EnvFailure] = {}
        cpu_s = 0.0
        queues: dict[int, list[int]] = {}  # worker -> its slots still to answer, in the order it serves them
        for w in dict.fromkeys(self._home[i] for i in slots):
            items = [(i, p) for i, p in zip(slots, payloads, strict=True) if self._home[i] == w]
            try:
                self._conns[w].send((cmd, items))
                queues[w] = [i for i, _ in items]
            except (BrokenPipeError, OSError) as exc:
                self._fail_worker(w, [i for i, _ in items], f"worker died before {cmd}: {exc}", results)
        deadlines = {w: time.monotonic() + timeout for w in queues}
        while queues:
            conns = {self._conns[w]: w for w in queues}
            ready = wait(list(conns), timeout=max(0.0, min(deadlines.values()) - time.monotonic()))
            if not ready:  # a worker has hung past its slot's deadline
                for w in [w for w in queues if deadlines[w] <= time.monotonic()]:
                    self._fail_worker(w, queues.pop(w), f"{cmd} timed out after {timeout:.1f}s", results)
                    del deadlines[w]
                continue
            for conn in ready:
                w = conns[conn]
                try:
                    i, status, value, seconds = conn.recv()
                except (EOFError, OSError):
                    self._procs[w].join(timeout=1)
                    message = f"worker crashed during {cmd} (exit code {self._procs[w].exitcode})"
                    self._fail_worker(w, queues.pop(w), message, results)
                    del deadlines[w]
                    continue
                queues[w].remove(i)
                deadlines[w] = time.monotonic() + timeout
                if status != "ok":  # the environment raised: its worker closed it, the slot's next call builds anew
                    self._built[i] = False
                    results[i] = self._failure(value)
                elif cmd == "build":
                    self._built[i] = True
                elif cmd != "drop":
                    results[i] = value
                cpu_s += seconds
                if not queues[w]:
                    del queues[w], deadlines[w]
        return results, cpu_s

    def _fail_worker(self, w: int, pending: list[int], message: str, results: dict) -> None:
        """Worker w died or hung while serving `pending[0]`: that slot fails with `message`, the rest of `pending` fail
        unserved, and the worker restarts (every episode it hosted is lost, `_restart`)."""
        results[pending[0]] = self._failure(message)
        for i in pending[1:]:
            results[i] = self._failure(f"not run: slot {pending[0]} of the same worker failed first ({message})")
        self._restart(w)

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

    def _failure(self, message: str) -> EnvFailure:
        """A failure in a worker, counted."""
        self.failures += 1
        return EnvFailure(message)

    def _stop(self, w: int) -> None:
        """Close worker w (and its environments)."""
        conn, proc = self._conns[w], self._procs[w]
        try:
            conn.send(("close", None))
            if conn.poll(5):
                conn.recv()
        except (BrokenPipeError, EOFError, OSError):
            pass
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
        conn.close()
        self._procs[w] = self._conns[w] = None

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
        for env in self._envs:
            if env is not None:
                env.close()
        if not self.in_process:
            for w, proc in enumerate(self._procs):
                if proc is not None:
                    self._stop(w)

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
