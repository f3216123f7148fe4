"""Run ``torchrun -m avatargen`` as a user would, and never leave a rank behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.conftest import REPO


def torchrun(
    *args: str, nproc: int = 2, env_extra: dict | None = None, timeout: float = 180, module: str = "avatargen"
) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node N -m MODULE ARGS``; on timeout its whole process group is killed."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", module, *args]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the workers too: no rank outlives a hung test
        out, err = proc.communicate()
        raise AssertionError(f"torchrun did not finish in {timeout} s: {err[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
