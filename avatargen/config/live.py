"""The live defaults: ``--realtime`` with ``--audio -`` on the bundled model renders for latency (docs/live.md)."""

from __future__ import annotations

from typing import Sequence

# Small causal chunks (pipeline=live), catching up to 0.3 s behind the voice, a 0.2-s output buffer (the jitter of
# a 4-frame chunk's emission on a 2-core CPU: docs/live.md, "Latency").
LIVE_DEFAULTS = ("pipeline=live", "output.realtime_target_s=0.3", "output.realtime_buffer_s=0.2")
_LIVE_MODELS = ("tiny",)  # the Wan families' chunks are fixed by their VAE: they keep their own pipeline


def live_overrides(overrides: Sequence[str], live: bool) -> list[str]:
    """``overrides`` with the live defaults in front (a key the user set keeps the user's value) when ``live``."""
    if not live:
        return list(overrides)
    given = {item.split("=", 1)[0].lstrip("+~") for item in overrides}
    model = next((item.split("=", 1)[1] for item in overrides if item.split("=", 1)[0] == "model"), "tiny")
    if model not in _LIVE_MODELS:
        return list(overrides)
    return [item for item in LIVE_DEFAULTS if item.split("=", 1)[0] not in given] + list(overrides)
