"""What every package's smoke and CLI tests check: every parameter moved, a one-process ZeRO-3 launch, the flags a
subcommand's `--help` lists, configuration errors in one line.

The smoke tests train two optimizer steps with a tiny model from `agentrl_shared.models` and compare the saved weights
with the initial ones; the ZeRO-3 variant runs in the test process under the environment `accelerate launch` would
set for one process.
"""

import contextlib
import io
import re
import socket
from collections.abc import Callable
from pathlib import Path


def changed_parameters(before_dir: Path, after_dir: Path) -> tuple[int, list[str]]:
    """`(number of tensors, names of the unchanged ones)` between two `model.safetensors` folders.

    The files are read directly: under a live ZeRO-3 config `from_pretrained` would partition the weights.
    """
    import torch
    from safetensors.torch import load_file

    before = load_file(Path(before_dir) / "model.safetensors")
    after = load_file(Path(after_dir) / "model.safetensors")
    if before.keys() != after.keys():
        raise AssertionError(f"different tensors: {sorted(before.keys() ^ after.keys())}")
    return len(before), [k for k in before if torch.equal(before[k], after[k])]


def zero3_single_process_env() -> dict[str, str]:
    """The variables `accelerate launch` sets for one DeepSpeed process, on a free local port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "ACCELERATE_USE_DEEPSPEED": "true"}  # fmt: skip


def help_flags(main: Callable[[list[str]], None], command: str) -> set[str]:
    """The `--flags` that `<pkg> <command> --help` lists, `--help` itself left out."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([command, "--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise AssertionError(f"{command} --help exited with {exc.code!r}") from None
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out.getvalue())) - {"--help"}


def error_line(main: Callable[[list[str]], None], argv: list[str]) -> str:
    """The message a command that must fail on its configuration ends with; it has to be one line."""
    try:
        main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str) or "\n" in exc.code:
            raise AssertionError(f"expected a one-line message, got exit {exc.code!r}") from None
        return exc.code
    raise AssertionError(f"{argv} did not fail")


__all__ = ["changed_parameters", "error_line", "help_flags", "zero3_single_process_env"]
