"""The Wan2.1 VAE: streamed decode == whole-clip decode == diffusers' AutoencoderKLWan, encode likewise (toy width,
random weights, fp32)."""

from __future__ import annotations

import pytest
import torch

from avatargen.families.wan.models.params import vae_params
from avatargen.families.wan.models.vae import WanVAE
from tests.models.wan.diffusers_keys import vae_to_diffusers

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def vae() -> WanVAE:
    torch.manual_seed(0)
    model = WanVAE(vae_params("wan_tiny")).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("gamma"):  # norm scales off 1 so that a swapped norm shows
                param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return model


def latents(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 16, frames, 2, 3, generator=torch.Generator().manual_seed(seed))  # (B, z, T, h, w)


def test_streamed_decode_equals_whole_clip_decode(vae: WanVAE) -> None:
    z = latents(5)[..., :2]
    with torch.no_grad():
        whole, _ = vae.decode(z, frames_per_step=None)  # one pass over all five latent frames
        pieces, stream = [], None
        for chunk in (z[:, :, :1], z[:, :, 1:3], z[:, :, 3:4], z[:, :, 4:]):  # uneven chunks, past carried along
            frames, stream = vae.decode(chunk, stream)
            pieces.append(frames)
    assert whole.shape == (1, 3, 1 + 4 * 4, 16, 16)
    assert [p.shape[2] for p in pieces] == [1, 8, 4, 4]
    assert stream.frames_seen == 5
    assert (torch.cat(pieces, dim=2) - whole).abs().max().item() <= TOLERANCE


def test_streamed_encode_equals_whole_clip_encode(vae: WanVAE) -> None:
    video = torch.rand(1, 3, 13, 16, 24, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        whole, _ = vae.encode(video, frames_per_step=None)
        head, stream = vae.encode(video[:, :, :5])
        tail, stream = vae.encode(video[:, :, 5:], stream, frames_per_step=8)
    assert whole.shape == (1, 16, 4, 2, 3)
    assert (torch.cat([head, tail], dim=2) - whole).abs().max().item() <= TOLERANCE


def test_encode_rejects_misaligned_frame_counts(vae: WanVAE) -> None:
    with pytest.raises(ValueError, match="1 \\+ 4k"):
        vae.encode(torch.zeros(1, 3, 4, 16, 16))


@pytest.fixture(scope="module")
def oracle(vae: WanVAE):
    diffusers = pytest.importorskip("diffusers")
    model = diffusers.AutoencoderKLWan(base_dim=vae.params.base_dim, z_dim=vae.params.z_dim)
    model.load_state_dict(vae_to_diffusers(vae.state_dict()), strict=True)
    return model.eval()


def _normalisation(vae: WanVAE) -> tuple[torch.Tensor, torch.Tensor]:
    mean = torch.tensor(vae.params.latent_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.params.latent_std).view(1, -1, 1, 1, 1)
    return mean, std


def test_decode_matches_diffusers(vae: WanVAE, oracle) -> None:
    z = latents(4, seed=5)
    mean, std = _normalisation(vae)
    with torch.no_grad():
        expected = oracle.decode(z * std + mean, return_dict=False)[0]  # diffusers takes raw latents
        got, _ = vae.decode(z)
    assert got.shape == expected.shape == (1, 3, 13, 16, 24)
    assert (expected.abs() < 1).float().mean() > 0.5  # mostly unclipped: the comparison sees real values
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_encode_matches_diffusers(vae: WanVAE, oracle) -> None:
    video = torch.rand(1, 3, 9, 16, 24, generator=torch.Generator().manual_seed(2)) * 2 - 1
    mean, std = _normalisation(vae)
    with torch.no_grad():
        expected = (oracle.encode(video).latent_dist.mode() - mean) / std
        got, _ = vae.encode(video)
    assert got.shape == expected.shape == (1, 16, 3, 2, 3)
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_key_mapping_agrees_with_diffusers_converter(vae: WanVAE) -> None:
    pytest.importorskip("diffusers")
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    state = vae.state_dict()
    assert sorted(convert_wan_vae_to_diffusers(dict(state))) == sorted(vae_to_diffusers(state))
