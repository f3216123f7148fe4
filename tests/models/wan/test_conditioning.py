"""The I2V input layout: which mask channel belongs to which video frame."""

from __future__ import annotations

import torch

from avatargen.families.wan.models.conditioning import i2v_input, i2v_mask


def test_reference_image_marks_all_four_channels_of_the_first_latent_frame_only() -> None:
    mask = i2v_mask(latent_frames=21, height=2, width=3)  # an 81-frame InfiniteTalk clip
    assert mask.shape == (1, 4, 21, 2, 3)
    assert mask[0, :, 0].eq(1).all()
    assert mask[0, :, 1:].eq(0).all()


def test_given_video_frames_map_to_latent_frame_and_channel() -> None:
    mask = i2v_mask(latent_frames=3, height=1, width=1, known_frames=6)  # video frames 0..5 of 9 given
    # padded video frames: [f0, f0, f0, f0, f1, f2, f3, f4, f5, f6, f7, f8] -> latent t, channel c = padded[4t + c]
    expected = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32).T  # (4, 3)
    assert torch.equal(mask[0, :, :, 0, 0], expected)


def test_input_channels_are_noise_mask_latent() -> None:
    noisy, latent = torch.full((2, 16, 3, 2, 2), 7.0), torch.full((2, 16, 3, 2, 2), -3.0)
    x = i2v_input(noisy, i2v_mask(3, 2, 2), latent)
    assert x.shape == (2, 36, 3, 2, 2)
    assert x[:, :16].eq(7).all() and x[:, 20:].eq(-3).all()
    assert x[:, 16:20, 0].eq(1).all() and x[:, 16:20, 1:].eq(0).all()
