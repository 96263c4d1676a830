import os
import time

import pytest

from agentrl_shared.offline import StaleJitLockError, check_jit_locks


def test_a_dead_jit_build_lock_is_refused_with_the_file_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    lock.touch()
    check_jit_locks()  # a build that started just now holds a fresh lock: wait for it, as torch does

    hour_ago = time.time() - 3600
    os.utime(lock, (hour_ago, hour_ago))
    with pytest.raises(
        StaleJitLockError, match=r"deepspeed_shm_comm/lock \(60 min old\).*rm .*deepspeed_shm_comm/lock"
    ):
        check_jit_locks()

    lock.unlink()
    check_jit_locks()
