"""MultiTalk's two-speaker routing, held against the formulas written out here independently (complex rotations,
a dense softmax, the min-max scaling); tests/models/wan/test_reference_parity.py holds it against MeiGen-AI's code."""

from __future__ import annotations

import math

import torch

from avatargen.families.wan.models.attention import AudioCrossAttention
from avatargen.families.wan.models.conditioning import person_masks
from avatargen.families.wan.models.dit import WanDiT
from avatargen.families.wan.models.params import AudioAdapterParams, dit_params
from avatargen.families.wan.models.speakers import SpeakerRouting, rope_1d, token_masks
from avatargen.models.sequence import attention as dense_attention


def test_rope_1d_rotates_each_channel_pair_by_position_times_frequency() -> None:
    x = torch.randn(1, 5, 2, 8, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([0.0, 1.5, 4.0, 12.0, 22.0])
    got = rope_1d(x, positions)
    pairs = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())  # (1, 5, 2, 4)
    freqs = torch.tensor([10000 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    angles = positions.double()[:, None] * freqs[None]  # (5, 4)
    expected = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)[None, :, None]).flatten(-2)
    assert (got.double() - expected).abs().max() < 1e-5


def test_attention_map_is_the_mean_over_heads_of_each_regions_share_of_first_frame_attention() -> None:
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 18, 3, 4, generator=g), torch.randn(1, 18, 3, 4, generator=g)  # 3 frames of 6 tokens
    masks = torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 1, 0, 0, 1]], dtype=torch.float32)
    got = SpeakerRouting(masks).attention_map(q, k)  # (3, 18)
    expected = torch.zeros(3, 18)
    for h in range(3):
        weights = torch.softmax(q[0, :, h] @ k[0, :6, h].T / 2.0, dim=-1)  # (18, 6): attention to frame 0
        for r in range(3):
            expected[r] += (weights * masks[r]).sum(-1) / masks[r].sum() / 3
    assert (got - expected).abs().max() < 1e-6


def test_label_positions_scale_each_speaker_into_its_range_and_fix_the_background() -> None:
    attention = torch.tensor([[0.9, 0.1, 0.5, 0.2], [0.1, 0.8, 0.4, 0.1], [0.0, 0.0, 0.1, 0.7]])
    got = SpeakerRouting.label_positions(attention)
    # token 0 -> speaker 1 at its max (4); token 1 -> speaker 2 at its max (24); token 2 -> speaker 1,
    # (0.5 - 0.1) / 0.8 of [0, 4]; token 3 -> background (12)
    expected = torch.tensor([4.0, 24.0, 0.4 / 0.8 * 4.0, 12.0])
    assert (got - expected).abs().max() < 1e-5


def test_person_masks_fill_each_box_and_give_the_rest_to_the_background() -> None:
    masks = person_masks([(0, 0, 32, 64), (40, 8, 64, 56)], height=64, width=64, latent_size=(8, 8))
    assert masks.shape == (3, 8, 8)
    assert masks[0, :, :4].all() and not masks[0, :, 4:].any()
    assert masks[1, 1:7, 5:].all() and not masks[1, :, :5].any()
    assert torch.equal(masks[2], ((masks[0] + masks[1]) == 0).float())


def test_two_speakers_are_routed_through_label_rope_in_the_audio_attention() -> None:
    """The audio attention of two speakers, written out: queries rotated by their label positions, each speaker's
    tokens by the centre of its range (2 and 22), per latent frame."""
    torch.manual_seed(0)
    attention = AudioCrossAttention(dim=16, heads=2, audio_dim=8).eval()
    x, audio = torch.randn(1, 2 * 6, 16), torch.randn(1, 2, 2 * 3, 8)  # 2 frames of 6 tokens; 3 tokens a speaker
    positions = torch.rand(12) * 24
    got = attention(x, audio, positions=positions)
    out = []
    for f in range(2):
        q = attention.q_linear(x[:, 6 * f : 6 * f + 6]).unflatten(-1, (2, 8))  # (1, 6, H, D)
        k, v = attention.kv_linear(audio[:, f]).unflatten(-1, (2, 2, 8)).unbind(2)  # (1, 6, H, D)
        q = rope_1d(q, positions[6 * f : 6 * f + 6])
        k = rope_1d(k, torch.tensor([2.0] * 3 + [22.0] * 3))
        out.append(attention.proj(dense_attention(q, k, v)))
    assert (got - torch.cat(out, dim=1)).abs().max() < 1e-6


def test_two_speaker_dit_needs_the_regions_and_one_speaker_is_unchanged_by_them() -> None:
    torch.manual_seed(0)
    params = dit_params("wan_tiny", clip_dim=32, audio=AudioAdapterParams(layers=2, channels=16, intermediate_dim=32,
                                                                       output_dim=32, context_tokens=4))  # fmt: skip
    dit = WanDiT(params).eval()
    latents, t = torch.randn(1, 36, 2, 8, 8), torch.tensor([500.0])
    text, clip = torch.randn(1, 5, 32), torch.randn(1, 9, 32)
    audio = torch.randn(1, 2, 5, 5, 2, 16)  # two speakers, 5 video frames
    masks = person_masks([(0, 0, 32, 64), (32, 0, 64, 64)], 64, 64, (8, 8))
    with torch.no_grad():
        two = dit(latents, t, text, clip, audio, person_masks=masks)
        one = dit(latents, t, text, clip, audio[:, 0])
        one_with_masks = dit(latents, t, text, clip, audio[:, 0], person_masks=masks)
        swapped = dit(latents, t, text, clip, audio.flip(1), person_masks=masks)
    assert two.shape == one.shape == (1, 16, 2, 8, 8)
    assert torch.equal(one, one_with_masks)  # one speaker: no routing, as the reference
    assert (two - swapped).abs().max() > 1e-4  # which speaker is which matters
    assert not math.isnan(two.sum().item())
    assert token_masks(masks, (4, 4)).shape == (3, 16)
