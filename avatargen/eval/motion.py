"""Where callers outside ``avatargen.eval`` found head motion and blinks before each became a metric of its own
(``head_motion.py``, ``blinks.py``)."""

from avatargen.eval.blinks import measure_blinks
from avatargen.eval.head_motion import measure_head_motion

__all__ = ["measure_blinks", "measure_head_motion"]
