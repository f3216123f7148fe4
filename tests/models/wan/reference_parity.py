"""avatargen's Wan path against MeiGen-AI's own code (reference_code.py), toy sizes, random weights, fp32, CPU.

Each function returns the measured maximum absolute differences; tests/models/wan/test_reference_parity.py asserts
them (skipped without a checkout) and benchmarks/quality/reference_parity.py prints them for docs/wan-parity.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from tests.models.wan.recorded_parity import TOY_DIT
from tests.models.wan.reference_code import function_from, load_module, multitalk_model, multitalk_utils, prepare


def _randomised(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """``module`` with every weight moved off its initial value (zero-initialised heads would hide differences)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return module.eval()


def dit_two_speakers(root: Path, frames: int = 3, height: int = 8, width: int = 12) -> dict[str, float]:
    """The DiT forward with the audio adapter: two speakers routed by their masks (MultiTalk's label RoPE), and one
    speaker; ours loads the reference model's state dict strictly."""
    prepare()
    from avatargen.families.wan.models.dit import WanDiT
    from avatargen.families.wan.models.params import AudioAdapterParams, dit_params

    torch.manual_seed(0)
    reference = multitalk_model(root).WanModel(weight_init=True, **TOY_DIT)
    reference.disable_teacache()
    _randomised(reference, 1)
    audio_params = AudioAdapterParams(layers=12, channels=768, intermediate_dim=32, output_dim=32, context_tokens=4)
    ours = WanDiT(dit_params("wan_tiny", clip_dim=1280, audio=audio_params)).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(16, frames, height, width, generator=g), torch.randn(20, frames, height, width, generator=g)
    t, text, clip = torch.tensor([730.0]), torch.randn(9, 32, generator=g), torch.randn(1, 257, 1280, generator=g)
    audio = torch.randn(2, 1 + 4 * (frames - 1), 5, 12, 768, generator=g)
    masks = torch.zeros(3, height, width)
    masks[0, 1:-1, : width // 2 - 1], masks[1, 1:-1, width // 2 + 1 :] = 1.0, 1.0
    masks[2] = (masks[:2].sum(0) == 0).float()
    tokens = frames * (height // 2) * (width // 2)
    out = {}
    with torch.no_grad():
        for name, speakers in (("two_speakers", audio), ("one_speaker", audio[:1])):
            expected = reference([x], t=t, context=[text], seq_len=tokens, clip_fea=clip, y=[y], audio=speakers,
                                 ref_target_masks=masks)  # fmt: skip
            got = ours(torch.cat([x, y])[None], t, text[None], clip, speakers[None] if len(speakers) > 1 else speakers,
                       person_masks=masks)  # fmt: skip
            out[name] = (got - expected).abs().max().item()
            out[f"{name}_scale"] = expected.abs().max().item()
    return out


def colour_correction(root: Path) -> dict[str, float]:
    """Ours against ``match_and_blend_colors`` on the same frames (a clip of 9 frames, 48 x 80), strength 1 and 0.5."""
    prepare()
    from avatargen.families.wan.colour import ColourTarget, match_and_blend

    reference = multitalk_utils(root).match_and_blend_colors
    g = torch.Generator().manual_seed(3)
    video = (torch.rand(1, 3, 9, 48, 80, generator=g) * 1.8 - 0.9).float()
    image = (torch.rand(1, 3, 1, 48, 80, generator=g) * 2 - 1).float()
    out = {}
    for strength in (1.0, 0.5):
        expected = reference(video.clone(), image.clone(), strength)
        got = match_and_blend(video, ColourTarget.of(image), strength)
        out[f"strength_{strength:g}"] = (got - expected).abs().max().item()
    return out


def dubbing_conditioning(root: Path, source_size: tuple[int, int] = (360, 640)) -> dict[str, float]:
    """A dubbing clip's conditioning from the same source frame: the framed frame (the reference's
    ``resize_and_centercrop`` at its 480p buckets, then ``/ 255``, ``- 0.5``, ``* 2``) and the I2V latent of
    [frame, black frames] through the reference's VAE (toy width, the same weights); and which source frames the
    clips read (the reference's ``audio_start_idx``)."""
    prepare()
    import torchvision.transforms as transforms

    from avatargen.families.wan.framing import cover_crop, pixels_to_unit_range
    from avatargen.families.wan.models.params import vae_params
    from avatargen.families.wan.models.vae import WanVAE
    from avatargen.pipeline.audio_timeline import AudioTimeline

    resize_and_centercrop = function_from(root / "wan" / "multitalk.py", "resize_and_centercrop", {
        "math": math, "torch": torch, "nn": torch.nn, "Image": Image, "np": np, "transforms": transforms})  # fmt: skip
    frame = np.asarray(Image.fromarray(np.random.default_rng(4).integers(0, 256, (*source_size, 3), dtype=np.uint8))
                       .resize(source_size[::-1]))  # fmt: skip
    framing = cover_crop(*source_size, 640, 16)
    expected_image = (resize_and_centercrop(Image.fromarray(frame), framing.target) / 255 - 0.5) * 2  # (1, 3, 1, H, W)
    ours_image = pixels_to_unit_range(framing.picture(frame), torch.device("cpu"))
    out = {"framed_frame": (ours_image - expected_image).abs().max().item(), "bucket": list(framing.target)}

    vae_module = load_module(root, "wan.modules.vae")
    params = vae_params("wan_tiny")  # base width 8, the reference's layout otherwise
    reference_vae = vae_module.WanVAE_(dim=params.base_dim, z_dim=params.z_dim, dim_mult=list(params.dim_mult),
                                       num_res_blocks=params.num_res_blocks, attn_scales=[],
                                       temperal_downsample=list(params.temporal_downsample))  # fmt: skip
    _randomised(reference_vae, 5)
    ours = WanVAE(params).eval()
    ours.load_state_dict(reference_vae.state_dict(), strict=True)
    small = torch.nn.functional.interpolate(ours_image[:, :, 0], size=(32, 64), mode="area")[:, :, None]
    video = torch.cat([small, torch.zeros(1, 3, 12, 32, 64)], dim=2)  # [frame, black frames]: 13 frames
    scale = [torch.tensor(params.latent_mean), 1.0 / torch.tensor(params.latent_std)]
    with torch.no_grad():
        expected = reference_vae.encode(video, scale)
        got, _ = ours.encode(video)
    out["i2v_latent"] = (got - expected).abs().max().item()
    timeline = AudioTimeline([np.zeros(400 * 640, np.float32)], 16000, 25, 0)  # 16 s: InfiniteTalk's 81-frame clips
    starts = [0] + [span.start - 9 for span in list(timeline.spans(72, 81))[1:]]  # ours: a clip's first frame, 9 motion
    out["clip_source_frames"] = starts
    out["reference_source_frames"] = [72 * k for k in range(len(starts))]  # audio_start_idx += frame_num - motion
    return out


def audio_features(root: Path, seconds: float = 30.0, window_s: float = 60.0) -> dict[str, float]:
    """Whole-file features of a ``seconds`` clip: the reference's ``loudness_norm`` and ``get_embedding`` (its
    Wav2Vec2Model subclass, transformers' feature extractor) against ours, streamed from an AudioTimeline with the
    file's statistics; toy wav2vec2, the same weights. ``window_s`` below ``seconds`` measures the windowed path."""
    prepare()
    import pyloudnorm
    from einops import rearrange
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor

    from avatargen.families.wan.config import WanAudioFeatures
    from avatargen.families.wan.models.specs import WAV2VEC2_TINY
    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder
    from avatargen.families.wan.stages.audio import WanAudioStage
    from avatargen.io.audio_stats import TrackStats
    from avatargen.modules import Module, ModuleSpec
    from avatargen.pipeline.audio_timeline import AudioTimeline
    from avatargen.runtime.placement import PlacementPlan, RandomInit

    config = Wav2Vec2Config(**WAV2VEC2_TINY)
    ours = Module.place(ModuleSpec("audio_encoder", lambda: Wav2Vec2Encoder(config)), RandomInit(7),
                        PlacementPlan("none", torch.device("cpu")))  # fmt: skip
    # the reference's forward sets config.output_attentions, which transformers 5 allows with eager attention only
    eager = Wav2Vec2Config(**WAV2VEC2_TINY, attn_implementation="eager")
    reference_model = load_module(root, "src.audio_analysis.wav2vec2").Wav2Vec2Model(eager).eval()
    reference_model.load_state_dict(ours.model.state_dict(), strict=True)
    namespace = {"np": np, "torch": torch, "rearrange": rearrange, "pyln": pyloudnorm}
    get_embedding = function_from(root / "generate_infinitetalk.py", "get_embedding", namespace)
    loudness_norm = function_from(root / "generate_infinitetalk.py", "loudness_norm", namespace)
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                         return_attention_mask=False)  # fmt: skip
    n = int(16000 * seconds)
    t = np.arange(n) / 16000
    g = np.random.default_rng(8)
    speech = (0.25 * np.sin(2 * np.pi * 170 * t) * (np.sin(2 * np.pi * 1.5 * t) > -0.2)
              * (0.3 + 0.7 * (t % 7 < 4)) + 0.01 * g.standard_normal(n)).astype(np.float32)  # loud and quiet stretches
    expected = get_embedding(loudness_norm(speech), extractor, reference_model)  # (frames, layers, C)
    frames = expected.shape[0]
    stage = WanAudioStage(ours, 16000, 25, WanAudioFeatures.whole, round(window_s * 25), 25, 81, 1,
                          (TrackStats.of(speech),))  # fmt: skip
    timeline = AudioTimeline([speech[i : i + 16000] for i in range(0, n, 16000)], 16000, 25, 25)
    got = torch.cat([stage.windows(timeline, s, min(s + 81, frames + 3))[0, :, 2] for s in range(0, frames + 3, 81)])
    difference = (got[:frames] - expected).abs()
    return {"features": difference.max().item(), "features_mean": difference.mean().item(), "scale": expected.abs().max().item(),
            "frames": frames, "tail_mirrored": (got[frames : frames + 3] - expected.flip(0)[:3]).abs().max().item()}
