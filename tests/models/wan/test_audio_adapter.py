"""InfiniteTalk's audio adapter: which wav2vec2 features each latent frame hears, and that it hears only those."""

from __future__ import annotations

import torch

from avatargen.families.wan.models import AudioAdapterParams, WanDiT, dit_params, latent_frame_windows


def test_latent_frames_see_the_features_their_video_frames_cover() -> None:
    params = AudioAdapterParams(layers=1, channels=1)
    video_frames = 1 + 4 * 3
    # feature value = 100 * video frame + position in its 5-frame window
    audio = (100 * torch.arange(video_frames)[:, None] + torch.arange(5)[None, :]).float()
    audio = audio[None, :, :, None, None]  # (1, 13, 5, 1, 1)
    first, later = latent_frame_windows(audio, params)
    assert first.flatten().tolist() == [0, 1, 2, 3, 4]
    for n in range(3):
        a, b, c, d = 1 + 4 * n, 2 + 4 * n, 3 + 4 * n, 4 + 4 * n  # the four video frames of latent frame n + 1
        expected = [100 * a, 100 * a + 1, 100 * a + 2, 100 * b + 2, 100 * c + 2]
        expected += [100 * d + 2, 100 * d + 3, 100 * d + 4]
        assert later[0, n].flatten().tolist() == expected


def test_audio_of_one_latent_frame_moves_only_that_frame() -> None:
    """One block: self-attention runs before the audio attention, and the FFN and head are per token, so the
    audio of latent frame 1 can change latent frame 1 only."""
    torch.manual_seed(0)
    model = WanDiT(dit_params("wan_tiny", num_layers=1)).eval()
    latents = torch.randn(1, 36, 3, 4, 4)
    text, clip = torch.randn(1, 5, 32), torch.randn(1, 257, 1280)
    audio = torch.randn(1, 9, 5, 2, 16)
    changed = audio.clone()
    changed[:, 1:5] += 1.0  # video frames 1..4 = latent frame 1
    t = torch.tensor([500.0])
    with torch.no_grad():
        before, after = model(latents, t, text, clip, audio), model(latents, t, text, clip, changed)
    moved = (after - before).abs().amax(dim=(0, 1, 3, 4))  # per latent frame
    assert moved[1] > 1e-3
    assert moved[0] == 0 and moved[2] == 0


def test_bf16_weights_run_and_stay_close_to_fp32() -> None:
    """The checkpoints are bf16: the model runs on bf16 weights from fp32 inputs (modulation kept in fp32)."""
    torch.manual_seed(0)
    model = WanDiT(dit_params("wan_tiny")).eval()
    inputs = (torch.randn(1, 36, 3, 4, 4), torch.tensor([700.0]), torch.randn(1, 5, 32), torch.randn(1, 257, 1280))
    audio = torch.randn(1, 9, 5, 2, 16)
    with torch.no_grad():
        full = model(*inputs, audio)
        half = model.to(torch.bfloat16)(*inputs, audio)
    assert half.dtype == torch.float32
    assert (half - full).abs().max() <= 0.05 * full.abs().max()
