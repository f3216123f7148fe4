"""Test-only entry point: ``torchrun -m tests.distributed.faulty_rank RANK ARGS`` is ``torchrun -m avatargen ARGS``
with rank RANK raising in its second DiT forward (the bundled A2V or the Wan DiT: mid-render, while the other ranks
are inside FSDP's or sequence parallelism's collectives).

The fault lives here, in test code: production code has no fault hooks.
"""

from __future__ import annotations

import os
import sys

from avatargen.families.tiny.models.a2v_dit import A2VDiT
from avatargen.families.wan.models.dit import WanDiT


def fail_in_second_dit_forward(rank: int) -> None:
    calls = {"n": 0}
    for model in (A2VDiT, WanDiT):
        original = model.forward

        def forward(self, *args, __original=original, **kwargs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError(f"test fault on rank {rank} in a DiT forward")
            return __original(self, *args, **kwargs)

        model.forward = forward


if __name__ == "__main__":
    failing = int(sys.argv.pop(1))
    if int(os.environ.get("RANK", 0)) == failing:
        fail_in_second_dit_forward(failing)
    from avatargen.cli import main

    main()
