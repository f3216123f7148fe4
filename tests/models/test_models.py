"""Behaviour of the five architectures at their default ("tiny") sizes, on CPU."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from avatargen.families.tiny.models import (
    VAE,
    A2VDiT,
    A2VDiTParams,
    AudioEncoder,
    AudioEncoderParams,
    SRDiT,
    SRDiTParams,
    TextEncoder,
    TextEncoderParams,
    VAEParams,
    tokenize,
)
from avatargen.families.tiny.models.layers import TransformerBlock
from avatargen.families.tiny.models.vae import CausalConv3d

PARAM_CLASSES = [AudioEncoderParams, TextEncoderParams, VAEParams, A2VDiTParams, SRDiTParams]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def randomize_zero_inits(model: torch.nn.Module, std: float = 0.05) -> torch.nn.Module:
    """Give every all-zero parameter (adaLN-Zero projections, zero heads) random values, as training would."""
    with torch.no_grad():
        for param in model.parameters():
            if not param.any():
                param.normal_(std=std)
    return model


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------- params


@pytest.mark.parametrize("cls", PARAM_CLASSES)
def test_params_are_omegaconf_structured_configs(cls) -> None:
    cfg = OmegaConf.structured(cls)
    back = OmegaConf.to_object(cfg)
    assert back == cls()


def test_models_build_on_meta_and_load_with_assign() -> None:
    """The loader builds on the meta device and assigns checkpoint tensors; nothing may be left on meta."""
    builders = [
        lambda: AudioEncoder(AudioEncoderParams()),
        lambda: TextEncoder(TextEncoderParams()),
        lambda: VAE(VAEParams()),
        lambda: A2VDiT(A2VDiTParams()),
        lambda: SRDiT(SRDiTParams()),
    ]
    for build in builders:
        real = build()
        with torch.device("meta"):
            model = build()
        model.load_state_dict(real.state_dict(), assign=True)
        assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
        for (name, buf), (_, ref) in zip(model.named_buffers(), real.named_buffers()):
            assert torch.equal(buf, ref), name


# ---------------------------------------------------------------------------------------------------- audio


def test_audio_encoder_shape_and_buffers_not_in_state_dict() -> None:
    enc = AudioEncoder(AudioEncoderParams())
    out = enc(torch.randn(2, 640 * 10) * 0.1)
    assert out.shape == (2, 10, 128)
    assert not any(k.endswith(("mel_fb", "window")) for k in enc.state_dict())


def test_audio_encoder_rejects_hop_not_dividing_frame() -> None:
    with pytest.raises(ValueError, match="hop_length"):
        AudioEncoder(AudioEncoderParams(hop_length=150))


def _padded_window(wave: torch.Tensor, a: int, b: int, r: int, spf: int) -> torch.Tensor:
    """Samples [(a - r) * spf, (b + r) * spf) of ``wave``, zero outside the audio."""
    padded = F.pad(wave, (r * spf, r * spf))  # index 0 of padded = sample -r * spf
    return padded[:, a * spf : (b + 2 * r) * spf]


def test_audio_features_do_not_depend_on_window_start() -> None:
    enc = AudioEncoder(AudioEncoderParams()).eval()
    spf, r = enc.samples_per_frame, enc.context_frames
    frames = 37
    wave = torch.randn(1, frames * spf) * 0.1
    with torch.no_grad():
        whole = enc(_padded_window(wave, 0, frames, r, spf))[:, r : r + frames]  # (1, T, D)
        bounds = [0, 5, 6, 18, 30, frames]
        parts = [enc(_padded_window(wave, a, b, r, spf))[:, r : r + b - a] for a, b in zip(bounds, bounds[1:])]
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------- text


def test_tokenize_frames_truncates_and_pads() -> None:
    tokens = tokenize(["", "hi", "x" * 100], max_tokens=16)
    assert tokens.shape == (3, 16)
    assert tokens[0, :2].tolist() == [256, 257] and (tokens[0, 2:] == 258).all()
    assert tokens[1, :4].tolist() == [256, ord("h"), ord("i"), 257]
    assert tokens[2, -1].item() == 257


def test_text_encoder_shapes_and_padding_invariance() -> None:
    enc = TextEncoder(TextEncoderParams()).eval()
    with torch.no_grad():
        feats, pooled = enc(tokenize(["", "a calm newsroom, soft light"], 64))
        _, alone = enc(tokenize([""], 64))
    assert feats.shape[0] == 2 and feats.shape[2] == 128 and pooled.shape == (2, 128)
    assert torch.isfinite(pooled).all()
    torch.testing.assert_close(pooled[:1], alone, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------- VAE


def test_vae_shapes_are_fully_convolutional() -> None:
    vae = VAE(VAEParams()).eval()
    with torch.no_grad():
        assert vae.encode(torch.rand(1, 3, 256, 256) * 2 - 1).shape == (1, 8, 32, 32)
        mean, logvar = vae.encode_distribution(torch.rand(2, 3, 128, 128) * 2 - 1)
        video, _ = vae.decode(torch.randn(1, 8, 3, 16, 16))
    assert mean.shape == logvar.shape == (2, 8, 16, 16)
    assert video.shape == (1, 3, 3, 128, 128)
    assert video.abs().max() <= 1.0


def test_vae_streaming_decode_equals_one_shot_decode() -> None:
    vae = VAE(VAEParams()).eval()
    latents = torch.randn(1, 8, 12, 8, 8)
    with torch.no_grad():
        whole, _ = vae.decode(latents)
        chunks, cache, start = [], None, 0
        for size in (5, 4, 3):
            video, cache = vae.decode(latents[:, :, start : start + size], cache)
            chunks.append(video)
            start += size
    torch.testing.assert_close(torch.cat(chunks, dim=2), whole, atol=1e-5, rtol=0)


def test_causal_conv_equals_the_conv3d_its_weights_come_from() -> None:
    # The layer keeps a Conv3d's weights (checkpoints load unchanged) but runs them as 2D convs per time tap.
    layer = CausalConv3d(6, 5, temporal_kernel=3)
    x, past = torch.randn(2, 6, 4, 7, 9), torch.randn(2, 6, 2, 7, 9)
    with torch.no_grad():
        out, cache = layer(x, past)
        expected = layer.conv(torch.cat([past, x], dim=2))  # (2, 5, 4, 7, 9)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(cache, x[:, :, -2:])
    assert set(layer.state_dict()) == {"conv.weight", "conv.bias"}


def test_a_decode_of_some_pixels_gives_the_whole_decodes_there_at_a_third_of_the_upper_levels() -> None:
    # The mouth box of a composited render: the levels above the latent grid compute only what those pixels need.
    vae = randomize_zero_inits(VAE(VAEParams())).eval()
    latents, read = torch.randn(1, 8, 3, 17, 20), (38, 108, 32, 120)  # (y0, y1, x0, x1) output pixels
    sizes: list[tuple[int, int]] = []
    hook = vae.decoder.up[-2].register_forward_hook(lambda module, args, out: sizes.append(tuple(args[0].shape[-2:])))
    with torch.no_grad():
        whole, whole_cache = vae.decode(latents)
        part, part_cache = vae.decode(latents, read=read)
    hook.remove()
    y0, y1, x0, x1 = read
    assert part.shape == (1, 3, 3, y1 - y0, x1 - x0)
    torch.testing.assert_close(part, whole[..., y0:y1, x0:x1], rtol=0, atol=1e-5)
    for a, b in zip(part_cache.frames, whole_cache.frames):  # the causal state is the whole latent grid's
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    (whole_rows, whole_cols), (rows, cols) = sizes  # the full-resolution level's last conv, 4x the latent grid
    assert rows * cols < 0.4 * whole_rows * whole_cols


def test_vae_decoder_cache_is_bounded() -> None:
    vae = VAE(VAEParams()).eval()

    def cache_bytes(n_calls: int) -> int:
        cache = None
        with torch.no_grad():
            for _ in range(n_calls):
                _, cache = vae.decode(torch.randn(1, 8, 2, 8, 8), cache)
        return sum(t.untyped_storage().nbytes() for t in cache.frames)

    assert cache_bytes(3) == cache_bytes(30) > 0


# ---------------------------------------------------------------------------------------------------- A2V DiT


def _a2v_inputs(batch: int = 1, frames: int = 6) -> dict[str, torch.Tensor]:
    p = A2VDiTParams()
    shape = (batch, p.latent_channels, frames, p.latent_size, p.latent_size)
    cond_mask = torch.zeros(batch, frames, dtype=torch.bool)
    cond_mask[:, :2] = True  # previous chunk's boundary frames
    return dict(
        x_t=torch.randn(shape),
        t=torch.rand(batch),
        cond_latents=torch.randn(shape),
        cond_mask=cond_mask,
        ref_latents=torch.randn(batch, p.latent_channels, p.latent_size, p.latent_size),
        audio=torch.randn(batch, frames, p.audio_dim),
        text=torch.randn(batch, p.text_dim),
    )


def test_a2v_shape_and_zero_init() -> None:
    model = A2VDiT(A2VDiTParams()).eval()
    inputs = _a2v_inputs(batch=2, frames=18)
    with torch.no_grad():
        v = model(**inputs)
    assert v.shape == inputs["x_t"].shape
    assert not v.any()  # adaLN-Zero + zero final layer: an untrained model predicts v = 0
    assert isinstance(model.blocks, torch.nn.ModuleList) and len(model.blocks) == 4


@pytest.fixture(scope="module")
def trained_like_a2v() -> A2VDiT:
    torch.manual_seed(1)
    return randomize_zero_inits(A2VDiT(A2VDiTParams())).eval()


@pytest.mark.parametrize("name", ["audio", "ref_latents", "text", "t"])
def test_a2v_velocity_depends_on_conditioning(name: str, trained_like_a2v: A2VDiT) -> None:
    model = trained_like_a2v
    inputs = _a2v_inputs(frames=4)
    changed = dict(inputs, **{name: inputs[name] + 0.5})
    with torch.no_grad():
        delta = (model(**inputs) - model(**changed)).abs().max()
    assert delta > 1e-4


def test_a2v_audio_change_is_felt_most_at_its_frame() -> None:
    model = randomize_zero_inits(A2VDiT(A2VDiTParams(depth=1))).eval()
    inputs = _a2v_inputs(frames=12)
    audio = inputs["audio"].clone()
    audio[:, 8] += 1.0
    with torch.no_grad():
        delta = (model(**inputs) - model(**dict(inputs, audio=audio))).abs().amax(dim=(0, 1, 3, 4))  # (T,)
    assert delta[6:11].min() > delta[:3].max()  # frames within audio_window of frame 8 vs frames far away


def test_a2v_conditioning_frames_ignore_x_t(trained_like_a2v: A2VDiT) -> None:
    model = trained_like_a2v
    inputs = _a2v_inputs(frames=4)
    x_t = inputs["x_t"].clone()
    x_t[:, :, :2] = torch.randn_like(x_t[:, :, :2])  # conditioned frames: noise must not matter
    cond = inputs["cond_latents"].clone()
    cond[:, :, 2:] = torch.randn_like(cond[:, :, 2:])  # unconditioned frames: clean latents must not matter
    with torch.no_grad():
        base = model(**inputs)
        torch.testing.assert_close(model(**dict(inputs, x_t=x_t)), base, atol=0, rtol=0)
        torch.testing.assert_close(model(**dict(inputs, cond_latents=cond)), base, atol=0, rtol=0)
        given = inputs["cond_latents"].clone()
        given[:, :, :2] += 1.0
        assert (model(**dict(inputs, cond_latents=given)) - base).abs().max() > 1e-4


@pytest.mark.parametrize("attention", ["axial", "full"])
@pytest.mark.parametrize("given", [[0, 1], [0, 1, 10, 11]])  # an N chunk's motion frames, an I chunk's anchors
def test_a2v_predicting_only_the_frames_not_given_gives_their_full_velocity(
    given: list[int], attention: str, trained_like_a2v: A2VDiT
) -> None:
    from avatargen.families.tiny.stages.a2v import generated_frames

    model = copy.deepcopy(trained_like_a2v)
    model.use_attention(attention)
    inputs = _a2v_inputs(frames=12)
    inputs["cond_mask"][:] = False
    inputs["cond_mask"][:, given] = True
    frames = generated_frames(inputs["cond_mask"])
    with torch.no_grad():
        full, part = model(**inputs), model(**inputs, frames_out=frames)
    f0, f1 = frames
    assert (f0, f1) == (2, 12 if len(given) == 2 else 10)
    torch.testing.assert_close(part[:, :, f0:f1], full[:, :, f0:f1], rtol=0, atol=1e-5)
    assert not part[:, :, :f0].any() and not part[:, :, f1:].any()


def _frame_axial_mask(frames: int, tokens: int, spatial_heads: int, heads: int) -> torch.Tensor:
    """The oracle's mask, (H, L, L): within a frame or the reference frame (frame 0) for the first heads, the same
    position in any frame for the rest."""
    frame, position = torch.arange(frames * tokens) // tokens, torch.arange(frames * tokens) % tokens
    within = (frame[:, None] == frame[None, :]) | (frame[None, :] == 0)
    along = position[:, None] == position[None, :]
    return torch.stack([within if h < spatial_heads else along for h in range(heads)])


def test_frame_axial_attention_is_full_attention_masked_to_its_frame_and_its_position() -> None:
    from avatargen.families.tiny.models.layers import FrameAxialAttention

    torch.manual_seed(0)
    frames, tokens, heads, dim = 5, 4, 4, 8
    q, k, v = (torch.randn(2, frames * tokens, heads, dim) for _ in range(3))  # (B, L, H, d)
    mask = _frame_axial_mask(frames, tokens, 2, heads)
    oracle = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), attn_mask=mask).transpose(1, 2)
    axial = FrameAxialAttention(tokens, spatial_heads=2)
    torch.testing.assert_close(axial(q, k, v).unflatten(2, (heads, dim)), oracle, rtol=0, atol=1e-5)
    # the queries of frames 2..3 alone, over every key
    part = axial(q[:, 2 * tokens : 4 * tokens], k, v, 0, 2 * tokens).unflatten(2, (heads, dim))
    torch.testing.assert_close(part, oracle[:, 2 * tokens : 4 * tokens], rtol=0, atol=1e-5)
    # heads 1..2 alone, as a rank of a sequence-parallel group holds them: one within frames, one along time
    some = axial(q[:, :, 1:3], k[:, :, 1:3], v[:, :, 1:3], 1).unflatten(2, (2, dim))
    torch.testing.assert_close(some, oracle[:, :, 1:3], rtol=0, atol=1e-5)


def test_an_axial_a2v_needs_two_heads_and_a_known_attention() -> None:
    with pytest.raises(ValueError, match="heads >= 2"):
        A2VDiT(A2VDiTParams(heads=1, dim=64))
    with pytest.raises(ValueError, match="attention must be one of axial, full"):
        A2VDiT(A2VDiTParams(attention="sparse"))
    A2VDiT(A2VDiTParams(heads=1, dim=64, attention="full"))


def test_frames_given_between_the_predicted_ones_leave_every_frame_predicted() -> None:
    from avatargen.families.tiny.stages.a2v import generated_frames

    assert generated_frames(torch.tensor([[True, False, True, False]])) is None
    assert generated_frames(torch.tensor([[True, False, False], [False, False, False]])) is None  # differs per sample
    assert generated_frames(torch.tensor([[False, False, True]])) == (0, 2)


# ---------------------------------------------------------------------------------------------------- SR DiT


def test_sr_untrained_model_is_the_upsampler() -> None:
    model = SRDiT(SRDiTParams()).eval()
    low, ref = torch.randn(3, 8, 16, 16), torch.randn(3, 8, 32, 32)
    with torch.no_grad():
        out = model(low, ref)
    assert out.shape == (3, 8, 32, 32)
    assert torch.equal(out, F.interpolate(low, size=(32, 32), mode="bilinear", align_corners=False))
    assert isinstance(model.blocks, torch.nn.ModuleList)


def test_sr_face_stream_only_changes_the_face_box() -> None:
    model = SRDiT(SRDiTParams()).eval()
    low, ref = torch.randn(2, 8, 16, 16), torch.randn(2, 8, 32, 32)
    with torch.no_grad():
        base = model(low, ref)
        model.face_head.weight.normal_(std=0.05)
        changed = (model(low, ref) - base).abs().amax(dim=(0, 1))  # (H, W)
    y0, y1, x0, x1 = model.face_box
    inside = torch.zeros_like(changed, dtype=torch.bool)
    inside[y0:y1, x0:x1] = True
    assert changed[inside].min() > 0 and not changed[~inside].any()


def test_sr_output_depends_on_reference() -> None:
    model = randomize_zero_inits(SRDiT(SRDiTParams())).eval()
    low, ref = torch.randn(2, 8, 16, 16), torch.randn(2, 8, 32, 32)
    with torch.no_grad():
        assert (model(low, ref) - model(low, ref + 0.5)).abs().max() > 1e-4


def test_a_last_block_computing_only_the_frame_tokens_gives_their_full_outputs() -> None:
    block = randomize_zero_inits(TransformerBlock(64, 4)).eval()
    x = torch.randn(2, 24, 64)
    with torch.no_grad():
        full = block(x)  # (2, 24, 64)
        tail = block(x, keep_from=8)  # (2, 16, 64)
        mask = torch.rand(2, 1, 24, 24) > 0.3
        mask[..., 0] = True
        masked_full, masked_tail = block(x, mask=mask), block(x, mask=mask, keep_from=8)
    assert tail.shape == (2, 16, 64)
    torch.testing.assert_close(tail, full[:, 8:], rtol=0, atol=1e-6)
    torch.testing.assert_close(masked_tail, masked_full[:, 8:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("box", [[0.5, 0.2, 0.4, 0.9], [0.1, 0.1, 1.2, 0.9], [0.1, 0.2, 0.3]])
def test_sr_rejects_bad_face_box(box: list[float]) -> None:
    with pytest.raises(ValueError, match="face_box"):
        SRDiT(SRDiTParams(face_box=box))


# ---------------------------------------------------------------------------------------------------- sizes


def test_model_sizes_stay_in_their_envelope() -> None:
    """The default architectures' sizes (what a 2-core CPU renders in real time; their speed: benchmarks/)."""
    models = {
        "audio_encoder": AudioEncoder(AudioEncoderParams()),
        "text_encoder": TextEncoder(TextEncoderParams()),
        "vae": VAE(VAEParams()),
        "a2v_dit": A2VDiT(A2VDiTParams()),
        "sr_dit": SRDiT(SRDiTParams()),
    }
    counts = {name: n_params(m) for name, m in models.items()}
    assert 2e6 <= counts["a2v_dit"] <= 4.5e6, counts
    assert 0.5e6 <= counts["sr_dit"] <= 2e6, counts
    assert counts["vae"] <= 1.5e6, counts
