"""Test set-up for `vad`: offline environment variables before transformers/trl are imported."""

import pytest

from agentrl_shared.offline import set_offline_env


set_offline_env()


@pytest.fixture
def readme(tmp_path):
    """A README with the blocks `vad report` fills, in `tmp_path` (its `results/` folder goes next to it)."""
    path = tmp_path / "README.md"
    path.write_text(
        "# x\n<!-- results:start -->\n<!-- results:end -->\n<!-- paired-cpu:start -->\n<!-- paired-cpu:end -->\n"
    )
    return path
