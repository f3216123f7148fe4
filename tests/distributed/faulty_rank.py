"""Test-only entry point: ``torchrun -m tests.distributed.faulty_rank RANK ARGS`` is ``torchrun -m avatargen ARGS``
with rank RANK raising in its second A2V forward (mid-render, while the other ranks are inside FSDP collectives).

The fault lives here, in test code: production code has no fault hooks.
"""

from __future__ import annotations

import os
import sys

from avatargen.families.tiny.models.a2v_dit import A2VDiT


def fail_in_second_a2v_forward(rank: int) -> None:
    original = A2VDiT.forward
    calls = {"n": 0}

    def forward(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError(f"test fault on rank {rank} in an A2V forward")
        return original(self, *args, **kwargs)

    A2VDiT.forward = forward


if __name__ == "__main__":
    failing = int(sys.argv.pop(1))
    if int(os.environ.get("RANK", 0)) == failing:
        fail_in_second_a2v_forward(failing)
    from avatargen.cli import main

    main()
