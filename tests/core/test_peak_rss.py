"""The peak RSS a render reports is its own, not inherited from whoever started it."""

import subprocess
import sys
import textwrap


def test_peak_rss_ignores_the_parents_high_water_mark():
    # The parent touches ~800 MiB and frees it, then starts a child that reports its peak: Linux's ru_maxrss would
    # say ~800 MiB (carried across exec), which made a 60-minute soak report a 2.2 GiB peak for a 436 MiB render.
    script = textwrap.dedent(
        """
        import subprocess, sys
        block = bytearray(800 * 1024 * 1024)
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block
        child = "from avatargen.runtime.memory import peak_rss_mb; print(peak_rss_mb())"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
        """
    )
    reported = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert 5 < reported < 300, f"child reported {reported} MiB"
