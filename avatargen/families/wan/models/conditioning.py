"""The image-to-video input contract of the Wan2.1 I2V DiT (``wan/image2video.py``, InfiniteTalk ``wan/multitalk.py``).

The DiT's 36 input channels are, in order: the 16 channels of the noisy latent, a 4-channel mask saying which video
frames are given, and the 16 channels of the VAE latent of the given frames followed by zero (black) frames. The mask
is per *video* frame, with the first frame repeated four times so that every latent frame owns four mask channels
(latent frame ``t``, channel ``c`` <-> padded video frame ``4 t + c``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def i2v_mask(latent_frames: int, height: int, width: int, known_frames: int = 1, temporal_stride: int = 4) -> Tensor:
    """The mask channels: ``(1, temporal_stride, latent_frames, height, width)``, 1 where the video frame is given.

    ``known_frames``: leading video frames that are given (1 for the reference image, as InfiniteTalk conditions).
    """
    video_frames = 1 + temporal_stride * (latent_frames - 1)
    if not 0 <= known_frames <= video_frames:
        raise ValueError(f"known_frames must be in [0, {video_frames}], got {known_frames}")
    given = torch.zeros(video_frames)
    given[:known_frames] = 1.0
    padded = torch.cat([given[:1].repeat(temporal_stride - 1), given])  # (stride * latent_frames,)
    mask = padded.view(latent_frames, temporal_stride).T  # (stride, latent_frames)
    return mask[None, :, :, None, None].expand(1, -1, -1, height, width).contiguous()


def given_latents_mask(given: list[bool], height: int, width: int, temporal_stride: int = 4) -> Tensor:
    """The mask channels ``(1, temporal_stride, len(given), height, width)`` of a window whose latent frames are
    each wholly given or not (1 on all four channels of a given latent frame): the first and last latent frames of a
    seam window, with anchors on both sides (Wan's first-last-frame conditioning, FLF2V, marks frames the same way)."""
    mask = torch.tensor(given, dtype=torch.float32)[None, :].expand(temporal_stride, -1)  # (stride, T)
    return mask[None, :, :, None, None].expand(1, -1, -1, height, width).contiguous()


def i2v_input(noisy: Tensor, mask: Tensor, given_latent: Tensor) -> Tensor:
    """The DiT input: ``noisy`` (B, 16, T, h, w), ``mask`` (1 or B, 4, T, h, w), ``given_latent`` (B, 16, T, h, w)
    -> (B, 36, T, h, w)."""
    mask = mask.to(noisy.dtype).expand(noisy.shape[0], -1, -1, -1, -1)
    return torch.cat([noisy, mask, given_latent.to(noisy.dtype)], dim=1)


def person_masks(boxes: list[tuple[float, float, float, float]], height: int, width: int,
                 latent_size: tuple[int, int]) -> Tensor:  # fmt: skip
    """Two speakers' regions as MultiTalk's ``ref_target_masks``: each box (x0, y0, x1, y1) in the frame's pixels
    filled (coordinates truncated, as the reference's ``int()``), then the background (in no box), each resized
    (nearest) to the latent grid: (len(boxes) + 1, h, w) of 0/1."""
    masks = torch.zeros(len(boxes) + 1, height, width)
    for k, (x0, y0, x1, y1) in enumerate(boxes):
        masks[k, int(y0) : int(y1), int(x0) : int(x1)] = 1.0
    masks[-1] = (masks[:-1].sum(0) == 0).float()
    resized = torch.nn.functional.interpolate(masks[None], size=latent_size, mode="nearest")[0]
    return (resized > 0).float()
