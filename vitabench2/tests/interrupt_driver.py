"""Runs the sample with scripted back ends (fixed delay per call) into argv[1]; exits 130 on Ctrl-C, as the CLI."""

import signal
import sys

from conftest import agent_one_call, judge_all, user_stop
from vitabench2.backends import ScriptedBackend
from vitabench2.cli import exit_interrupted
from vitabench2.runner import RunConfig, Runner


def build(output: str, delay_s: float) -> Runner:
    config = RunConfig(output=output, memory_type="full_context", num_trials=2, max_concurrency=2)
    backends = [ScriptedBackend(f, delay_s=delay_s) for f in (agent_one_call, user_stop, judge_all())]
    return Runner(config, *backends)


if __name__ == "__main__":
    # Ctrl-C as in a terminal even when the test session was started in the background (`cmd &` in a script starts
    # with SIGINT ignored, and a child inherits that: the signal would never arrive)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        build(sys.argv[1], float(sys.argv[2])).run()
    except KeyboardInterrupt:
        exit_interrupted()
