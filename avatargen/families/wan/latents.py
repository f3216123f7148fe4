"""Where a Wan latent frame sits on the timeline: the VAE packs a new stream's video as 1, 4, 4, ... frames.

A window of latents is held as a ``LatentWindow`` over 4-frame slots: slot j covers timeline frames
[start + 4 j, start + 4 j + 4); for a new stream (a clip, a seam window) ``start`` is put 3 frames before its first
frame, so latent 0 is that frame alone (the last of its slot). Clip boundaries, seam halves and anchors are whole
slots past frame 0, so every window shares one grid and the decoder stream takes their latents as one video.
"""

from __future__ import annotations

from torch import Tensor

from avatargen.pipeline.state import LatentWindow


def packed_window(start: int, latents: Tensor, step: int) -> LatentWindow:
    """Latents of a window whose video starts at timeline frame ``start``, packed as the Wan VAE packs a new stream
    (latent 0 is frame ``start`` alone, each later one ``step`` frames), as a ``LatentWindow`` over ``step``-frame
    slots: the window's start is put ``step - 1`` frames earlier, so latent j covers slot [start', start' + step)."""
    return LatentWindow(start - (step - 1), latents)


def packed_latents(window: LatentWindow, start: int, end: int, step: int) -> Tensor:
    """The latents of timeline frames [start, end) of a packed window (``end`` rounded up to a whole latent frame):
    (1, z, t, h, w). ``start`` must begin a latent frame."""
    first = (start - window.start) // step  # a stream's first frame is the last of slot 0
    if (start - window.start) % step not in (0, step - 1) or ((start - window.start) % step and first):
        raise ValueError(f"frame {start} does not begin a latent frame of the window from {window.start}")
    last = -(-(end - window.start) // step)
    return window.latents[:, :, first:last]


def trimmed(window: LatentWindow, start: int, step: int) -> LatentWindow | None:
    """The packed window from timeline frame ``start`` on (a copy: the rest is freed), or None when nothing is left."""
    first = (start - window.start) // step
    if first >= window.latents.shape[2]:
        return None
    return LatentWindow(window.start + first * step, window.latents[:, :, first:].clone())
