"""The output lock: one writer per output, named to the next one, released by the kernel when its holder dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from avatargen.io.output_lock import OutputLock, OutputLockedError, is_locked, lock_path_for, read_holder
from tests.conftest import REPO

HOLD = "import sys, time; from avatargen.io.output_lock import OutputLock; OutputLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)"


def _holder(output: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(output)], env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_writer_is_refused_naming_the_first_and_a_killed_holder_frees_the_output(tmp_path):
    output = tmp_path / "o.mp4"
    holder = _holder(output)
    try:
        assert is_locked(output) and read_holder(lock_path_for(output)).pid == holder.pid
        with pytest.raises(OutputLockedError) as error:
            OutputLock(output).acquire()
        assert f"avatargen pid {holder.pid} on host {socket.gethostname()}" in str(error.value)
        assert not OutputLock(output).try_acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not is_locked(output)  # the kernel let go of it; the stale file is no obstacle
    with OutputLock(output) as lock:
        assert lock.held and read_holder(lock.path).pid == os.getpid()
    assert not lock_path_for(output).exists()  # a clean release removes the file

