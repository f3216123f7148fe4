"""Test-only entry point: ``torchrun -m tests.distributed.faulty_rank RANK ARGS`` is ``torchrun -m avatargen ARGS``
with rank RANK raising in its second DiT forward (the bundled A2V or the Wan DiT: mid-render, while the other ranks
are inside FSDP's or sequence parallelism's collectives; LiveAvatar's: a step of a block, while the other stages wait
for that block). ``AVATARGEN_TEST_FAULT_CALL=N`` moves the fault to the N-th forward (after resume points were saved).

The fault lives here, in test code: production code has no fault hooks.
"""

from __future__ import annotations

import os
import sys

from avatargen.families.liveavatar.models.dit import LiveAvatarDiT
from avatargen.families.tiny.models.a2v_dit import A2VDiT
from avatargen.families.wan.models.dit import WanDiT


def fail_in_second_dit_forward(rank: int) -> None:
    calls, failing = {"n": 0}, int(os.environ.get("AVATARGEN_TEST_FAULT_CALL", "2"))
    for model, method in ((A2VDiT, "forward"), (WanDiT, "forward"), (LiveAvatarDiT, "block")):
        original = getattr(model, method)

        def forward(self, *args, __original=original, **kwargs):
            calls["n"] += 1
            if calls["n"] == failing:
                raise RuntimeError(f"test fault on rank {rank} in a DiT forward")
            return __original(self, *args, **kwargs)

        setattr(model, method, forward)


if __name__ == "__main__":
    failing = int(sys.argv.pop(1))
    if int(os.environ.get("RANK", 0)) == failing:
        fail_in_second_dit_forward(failing)
    from avatargen.cli import main

    main()
